"""The agent <-> trainer control channel: typed messages in files under ``EDL_CONTROL_DIR``.

The agent hands the trainer its next world (`NextWorld`) and asks it to drain to a generation;
the trainer reports when it reached each milestone of a generation (`Timings`) and says how it
ended through its exit status. Every message is a dataclass with ``to_json`` / ``from_json``,
written atomically (temp file + rename), so neither side ever reads half a message and the
JSON keys live here only.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.protocol.errors import ProtocolError
from agent.protocol.trainer_world import TrainerWorld

RESCALE_EXIT = 75
"""Exit status of a trainer that stopped at an agreed step boundary with its state saved."""
PEER_LOST_EXIT = 76
"""Exit status of a trainer whose collective failed mid-step; its committed state is saved."""
STANDBY_GENERATION = 0
"""Generation of a trainer started warm, before its agent is in any world (real ones are >= 1)."""
DRAIN_FILE = "drain"
"""Holds the generation the trainer should drain *to*; stale once the trainer is there."""
WORLD_FILE = "world.json"
"""The next world (`NextWorld`)."""


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ProtocolError(f"{what} is not JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ProtocolError(f"{what} is not a JSON object")
    return raw


@dataclass(frozen=True)
class NextWorld:
    """The world the trainer should move to, or None: leave the job at the next boundary."""

    generation: int
    world: TrainerWorld | None

    def to_json(self) -> str:
        """``{"generation": N, "world": {...}}`` or ``{"generation": N, "leave": true}``."""
        if self.world is None:
            return json.dumps({"generation": self.generation, "leave": True})
        return json.dumps({"generation": self.generation, "world": self.world.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> NextWorld:
        """Inverse of `to_json`; raises `ProtocolError`."""
        raw = _load(text, "next world")
        try:
            generation = int(raw["generation"])
            if raw.get("leave"):
                return cls(generation, None)
            return cls(generation, TrainerWorld.from_dict(raw["world"]))
        except (KeyError, TypeError, ValueError, ConfigError) as e:
            raise ProtocolError(f"not a next world: {e}") from e


@dataclass(frozen=True)
class Timings:
    """When a trainer reached each milestone of one generation (Unix seconds), and how.

    ``started`` the process (or, in-process, the re-init) began; ``imported`` the framework and
    the script's modules are loaded; ``master`` rank 0's store is reachable; ``initialised``
    the collective is formed and every rank agrees on the generation; ``restored`` the state
    hand-off is done; ``first_step`` the first step in this world ended; ``stopped`` the end
    of the last step it trained in this world, once it stopped training here (an agreed stop
    at a step boundary, or a failed collective: the step that broke is redone); ``finished``
    the script ended the job (exit 0) at global step ``finished_step``.

    ``stopped`` is where an honest rescale pause starts: a peer's planned leave stops every
    rank at the same boundary before this member's agent even hears of the new world.
    """

    rank: int = 0
    reinit: str = "process"
    """``in-process`` or ``process``: how this trainer lives through a rescale."""
    framework: str = ""
    """The registered framework the trainer uses (the agent learns it from a warm stand-by)."""
    started: float | None = None
    imported: float | None = None
    master: float | None = None
    initialised: float | None = None
    restored: float | None = None
    first_step: float | None = None
    stopped: float | None = None
    finished: float | None = None
    finished_step: int | None = None

    def to_json(self) -> str:
        """One flat JSON object; milestones not reached yet are left out."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_json(cls, text: str) -> Timings:
        """Inverse of `to_json` (unknown keys are ignored); raises `ProtocolError`."""
        raw = _load(text, "timings")
        values: dict[str, Any] = {}
        try:
            for f in fields(cls):
                if raw.get(f.name) is None:
                    continue
                kind = {"rank": int, "finished_step": int, "reinit": str, "framework": str}
                values[f.name] = kind.get(f.name, float)(raw[f.name])
        except (TypeError, ValueError) as e:
            raise ProtocolError(f"not timings: {e}") from e
        return cls(**values)


def write_atomic(path: Path, text: str) -> None:
    """Replaces `path` with `text` so that a reader sees the old or the new file, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class ControlChannel:
    """The files of one member's control directory, as both processes use them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def timings_path(self, generation: int) -> Path:
        """Where the trainer reports its milestones of `generation`."""
        return self.directory / f"timings-g{generation}.json"

    # -- agent -> trainer -----------------------------------------------------------------------

    def hand_over(self, next_world: NextWorld) -> None:
        """Writes the next world, then asks the running trainer to drain to its generation."""
        write_atomic(self.directory / WORLD_FILE, next_world.to_json())
        (self.directory / DRAIN_FILE).write_text(str(next_world.generation), encoding="utf-8")

    def clear(self) -> None:
        """Removes a pending hand-over (before a trainer is started in its world)."""
        for name in (DRAIN_FILE, WORLD_FILE):
            (self.directory / name).unlink(missing_ok=True)

    def next_world(self) -> NextWorld | None:
        """The world handed over, or None when there is none (or it is unreadable)."""
        try:
            return NextWorld.from_json((self.directory / WORLD_FILE).read_text(encoding="utf-8"))
        except (OSError, ProtocolError):
            return None

    def drain_requested(self, generation: int) -> bool:
        """True when the agent asked a trainer in `generation` to stop at the next boundary.

        The file names the generation to drain *to*: once the trainer is there it is stale.
        Anything else in it (a hand edit) counts as a request.
        """
        try:
            target = (self.directory / DRAIN_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return False
        return not target.isdigit() or int(target) > generation

    # -- trainer -> agent -----------------------------------------------------------------------

    def report(self, generation: int, timings: Timings) -> None:
        """Replaces the trainer's timings of `generation`."""
        write_atomic(self.timings_path(generation), timings.to_json())

    def timings(self, generation: int) -> Timings | None:
        """The trainer's timings of `generation`, or None before it reported (or unreadable)."""
        try:
            return Timings.from_json(self.timings_path(generation).read_text(encoding="utf-8"))
        except (OSError, ProtocolError):
            return None

    def finished_step(self) -> int | None:
        """The step at which a trainer reported finishing the job, in whichever generation.

        The script ends in the world it trained in, which is not always the one its agent
        holds last: a newer world may have been handed over while the last step ran.
        """

        def generation(path: Path) -> int:
            digits = path.name.removeprefix("timings-g").removesuffix(".json")
            return int(digits) if digits.isdigit() else -1

        try:
            paths = sorted(self.directory.glob("timings-g*.json"), key=generation)
        except OSError:
            return None
        for path in reversed(paths):
            try:
                step = Timings.from_json(path.read_text(encoding="utf-8")).finished_step
            except (OSError, ProtocolError):
                continue
            if step is not None:
                return step
        return None
