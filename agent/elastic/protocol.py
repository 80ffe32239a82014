"""The agent <-> trainer control channel: files in ``EDL_CONTROL_DIR`` and exit statuses.

Kept free of Paddle so the agent (which never imports Paddle) and the trainer share one
definition of every name.
"""

from __future__ import annotations

from pathlib import Path

RESCALE_EXIT = 75
"""Exit status of a trainer that stopped at an agreed step boundary with its state saved."""
PEER_LOST_EXIT = 76
"""Exit status of a trainer whose collective failed mid-step; its committed state is saved."""
STANDBY_GENERATION = 0
"""Generation of a trainer started warm, before its agent is in any world (real ones are >= 1)."""
DRAIN_FILE = "drain"
"""Holds the generation the trainer should drain *to*; stale once the trainer is there."""
WORLD_FILE = "world.json"
"""The next world (``{"generation", "env"}`` or ``{"generation", "leave": true}``)."""
FINISHED_STEP = "finished_step"
"""Key of the timings report holding the global step a trainer finished the job at (exit 0)."""


def timings_path(control_dir: Path, generation: int) -> Path:
    """Where a trainer reports when it reached each milestone of generation `generation`."""
    return control_dir / f"timings-g{generation}.json"
