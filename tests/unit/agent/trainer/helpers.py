"""Fakes of the trainer library's seams (no tests, no fixtures): collectives of one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.elastic import ElasticTrainer
from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.recording import StepRecorder
from agent.trainer.session import TrainingSession
from agent.trainer.settings import ElasticTrainerSettings


class RecordingCollective:
    """Forms nothing; remembers the worlds it was asked to form (all of one rank here)."""

    def __init__(self) -> None:
        self.formed: list[TrainerWorld] = []

    def init(self, world: TrainerWorld, in_process: bool, timeout_seconds: float) -> None:
        self.formed.append(world)

    def all_reduce_ints(self, values: list[int], op: ReduceOp) -> list[int]:
        return list(values)

    def self_test(self, backend: str) -> str | None:
        return "not needed"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected collective call {name}")


class DictCollective:
    """A one-rank collective whose "model" is a dict; counts the states loaded into it."""

    def __init__(self) -> None:
        self.loaded = 0
        self.fail_load = False
        self.formed: list[TrainerWorld] = []

    def init(self, world: TrainerWorld, in_process: bool, timeout_seconds: float) -> None:
        self.formed.append(world)

    def all_reduce_ints(self, values: list[int], op: ReduceOp) -> list[int]:
        return list(values)

    def save_state(self, model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return dict(model), {}

    def load_state(self, model: Any, optimizer: Any, m: dict[str, Any], o: dict[str, Any]) -> None:
        if self.fail_load:
            model["w"] = "half"
            raise RuntimeError("torn")
        self.loaded += 1
        model.clear()
        model.update(m)

    def self_test(self, backend: str) -> str | None:
        return "not needed"


class Ranks:
    """A world this process is rank `rank` of, as the step loop sees it (`LoopWorld`).

    Collectives answer with this rank's own values; the test sets the drain flag and moves the
    world (rank, size, generation); milestones are remembered.
    """

    def __init__(self, rank: int = 0, size: int = 1, generation: int = 1) -> None:
        self.rank, self.world_size, self.generation = rank, size, generation
        self.drain = False
        self.marks: list[str] = []

    def all_reduce(self, values: list[int], op: ReduceOp) -> list[int]:
        return list(values)

    def broadcast_bytes(self, blob: bytes, src: int) -> bytes:
        return blob

    def drain_requested(self) -> bool:
        return self.drain

    def stop_agreed(self) -> bool:
        return self.drain

    def mark(self, milestone: str, **values: float | int) -> None:
        self.marks.append(milestone)


def trainer(
    tmp_path: Path,
    world: TrainerWorld,
    collective: Any = None,
    **settings: Any,
) -> ElasticTrainer:
    """An `ElasticTrainer` of `world` on `collective` (a `RecordingCollective` by default)
    with a control channel in `tmp_path` / control (the agent's side of it is the test)."""
    control = tmp_path / "control"
    control.mkdir(exist_ok=True)
    options = {"control_dir": control, "master_wait_seconds": 60.0, **settings}
    session = TrainingSession(world, StepRecorder(), None)
    fake: Any = collective if collective is not None else RecordingCollective()
    return ElasticTrainer(
        session, ElasticTrainerSettings(**options), frameworks.get("paddle"), fake
    )
