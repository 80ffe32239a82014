"""Trainer counters, summed over every incarnation's report in the metrics directory.

Summing all incarnations is what keeps `edl_trainer_*_total` monotonic per pod while the agent
restarts its trainer: a new incarnation starts from zero in its own file, and the old files
stay.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agent.collectors.families import histogram
from agent.collectors.health import CollectorHealth
from agent.trainer.recording import STEP_DURATION_BUCKETS
from agent.trainer.reports import read_reports


class TrainerReportCollector(Collector):
    """Reads `metrics_dir` at each scrape and exports the summed trainer counters.

    A report with other histogram bounds than `bounds` still counts for steps, samples and
    communication but is left out of the histogram (and counted as an error), rather than
    being merged wrongly.
    """

    NAME = "trainer_reports"

    def __init__(
        self,
        metrics_dir: Path,
        health: CollectorHealth,
        bounds: tuple[float, ...] = STEP_DURATION_BUCKETS,
    ) -> None:
        self._dir = metrics_dir
        self._health = health
        self._bounds = bounds

    def collect(self) -> Iterable[Metric]:
        """Yields samples, steps, step-duration histogram, comm seconds/bytes, last step time."""
        scan = read_reports(self._dir)
        if scan.errors:
            self._health.record_error(self.NAME, len(scan.errors))
        steps = samples = comm_bytes = 0
        comm_seconds = hist_sum = 0.0
        counts = [0] * (len(self._bounds) + 1)
        last_step: float | None = None
        for r in scan.reports:
            c = r.counters
            steps += c.steps
            samples += c.samples
            comm_seconds += c.comm_seconds
            comm_bytes += c.comm_bytes
            if c.last_step_unix is not None:
                last_step = max(last_step or 0.0, c.last_step_unix)
            if c.step_bucket_bounds == self._bounds:
                counts = [a + b for a, b in zip(counts, c.step_bucket_counts, strict=True)]
                hist_sum += c.step_seconds_sum
            else:
                self._health.record_error(self.NAME)
        yield CounterMetricFamily(
            "edl_trainer_samples_total",
            "Training samples processed by this pod's trainer (all incarnations).",
            value=samples,
        )
        yield CounterMetricFamily(
            "edl_trainer_steps_total",
            "Optimizer steps completed by this pod's trainer (all incarnations).",
            value=steps,
        )
        yield histogram(
            "edl_trainer_step_duration_seconds",
            "Wall time of one whole training step (compute + communication).",
            self._bounds,
            counts,
            hist_sum,
        )
        yield CounterMetricFamily(
            "edl_trainer_comm_seconds_total",
            "Wall time spent in gradient all-reduce, waiting for other ranks included.",
            value=comm_seconds,
        )
        yield CounterMetricFamily(
            "edl_trainer_comm_bytes_total",
            "Gradient payload bytes this rank put into all-reduce.",
            value=comm_bytes,
        )
        if last_step is not None:
            yield GaugeMetricFamily(
                "edl_trainer_last_step_timestamp_seconds",
                "Unix time at which the trainer last finished a step.",
                value=last_step,
            )
