"""Helpers shared by the agent's unit tests (fakes and a scrape; no tests, no fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.elastic import ElasticTrainer, ElasticTrainerSettings
from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.recording import StepRecorder
from agent.trainer.session import TrainingSession


def scrape(registry: CollectorRegistry) -> dict[str, float]:
    """Renders the registry as the exporter does and parses it back: {sample{labels}: value}."""
    text = generate_latest(registry).decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


class StubTrainer:
    """The supervised trainer as the exporter's collectors see it: rank 1 of 2, not running."""

    world = TrainerWorld(rank=1, world_size=2, generation=4)
    pid: int | None = None
    starts = 0


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


def trainer(tmp_path: Path, world: TrainerWorld) -> tuple[ElasticTrainer, RecordingCollective]:
    control = tmp_path / "control"
    control.mkdir(exist_ok=True)
    settings = ElasticTrainerSettings(control_dir=control, master_wait_seconds=60)
    collective = RecordingCollective()
    session = TrainingSession(world, StepRecorder(), None)
    et = ElasticTrainer(session, settings, frameworks.get("paddle"), collective)  # type: ignore[arg-type]
    return et, collective
