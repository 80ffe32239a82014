"""Old import path of `TrainerWorld`, kept for scripts: use `agent.protocol.trainer_world`.

Not to be confused with `agent.elastic.world` (the membership's `World` of one generation).
"""

from agent.protocol.trainer_world import TrainerWorld

__all__ = ["TrainerWorld"]
