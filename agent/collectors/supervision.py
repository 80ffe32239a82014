"""What the agent itself knows: is a trainer up, how often it started, its world, rescales."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agent.collectors.families import histogram
from agent.process.rescales import RescaleLog
from agent.protocol.trainer_world import TrainerWorld


class SupervisedTrainer(Protocol):
    """The part of `TrainerSupervisor` this collector reads."""

    @property
    def world(self) -> TrainerWorld: ...  # noqa: D102
    @property
    def pid(self) -> int | None: ...  # noqa: D102
    @property
    def starts(self) -> int: ...  # noqa: D102


class SupervisionCollector(Collector):
    """Exports trainer up/starts, world gauges and the rescale figures."""

    NAME = "supervision"

    def __init__(self, trainer: SupervisedTrainer, rescales: RescaleLog) -> None:
        self._trainer = trainer
        self._rescales = rescales

    def collect(self) -> Iterable[Metric]:
        """Yields the supervision families."""
        world = self._trainer.world
        up = 1 if self._trainer.pid is not None else 0
        yield GaugeMetricFamily("edl_trainer_up", "1 while a trainer process is running.", up)
        yield CounterMetricFamily(
            "edl_trainer_restarts_total",
            "Trainer processes started by the agent, the first start included.",
            value=self._trainer.starts,
        )
        yield GaugeMetricFamily(
            "edl_trainer_world_size", "Size of the current collective world.", world.world_size
        )
        yield GaugeMetricFamily("edl_trainer_rank", "This pod's rank in the world.", world.rank)
        yield GaugeMetricFamily(
            "edl_trainer_generation", "Generation number of the current world.", world.generation
        )
        r = self._rescales.snapshot()
        yield CounterMetricFamily(
            "edl_trainer_rescales_total",
            "TrainerWorld changes this pod went through.",
            value=r.rescales,
        )
        yield histogram(
            "edl_trainer_rescale_pause_seconds",
            "From the decision to rescale to the first step at the new world size.",
            r.pause_bucket_bounds,
            r.pause_bucket_counts,
            r.pause_seconds_sum,
        )
        phases = CounterMetricFamily(
            "edl_trainer_rescale_phase_seconds_total",
            "Time spent per rescale phase.",
            labels=["phase"],
        )
        for name, seconds in r.phase_seconds.items():
            phases.add_metric([name], seconds)
        yield phases


class FinishedJob(Protocol):
    """The part of `ElasticSupervisor` `JobFinishedCollector` reads."""

    @property
    def job_finished(self) -> bool: ...  # noqa: D102


class JobFinishedCollector(Collector):
    """`edl_trainer_job_finished`: 1 once the agent knows the job is done (it then idles)."""

    def __init__(self, elastic: FinishedJob) -> None:
        self._elastic = elastic

    def collect(self) -> Iterable[Metric]:
        """Yields the one gauge."""
        yield GaugeMetricFamily(
            "edl_trainer_job_finished",
            "1 once the elastic job is finished (no trainer is started any more).",
            1 if self._elastic.job_finished else 0,
        )
