"""Old import path of `TrainerWorld`, kept for scripts: use `agent.protocol.world`."""

from agent.protocol.world import TrainerWorld

__all__ = ["TrainerWorld"]
