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
from agent.collectors.progress import EtaEstimator, ProgressPoint
from agent.trainer.recording import MAX_SCALARS, SCALAR_NAME, STEP_DURATION_BUCKETS
from agent.trainer.reports import TrainerReport, read_reports


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
        eta: EtaEstimator | None = None,
    ) -> None:
        self._dir = metrics_dir
        self._health = health
        self._bounds = bounds
        self._eta = eta or EtaEstimator()

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
        yield from self._job_progress(scan.reports)

    def _job_progress(self, reports: tuple[TrainerReport, ...]) -> Iterable[Metric]:
        """The newest incarnation's progress, step and scalars (gauges: the latest values)."""
        newest = [r for r in reports if r.counters.progress is not None]
        if newest:
            report = newest[-1]
            ratio = min(1.0, max(0.0, report.counters.progress or 0.0))
            at = report.counters.last_step_unix or report.updated_unix
            self._eta.observe(ProgressPoint(at, ratio))
            yield GaugeMetricFamily(
                "edl_job_progress_ratio",
                "The job's samples trained over its planned total, 0-1.",
                value=ratio,
            )
            eta = self._eta.eta()
            if eta is not None:
                yield GaugeMetricFamily(
                    "edl_job_eta_seconds",
                    "Seconds until the job is done at its recent rate of progress.",
                    value=eta,
                )
        stepped = [r for r in reports if r.counters.global_step is not None]
        if stepped:
            yield GaugeMetricFamily(
                "edl_job_global_step",
                "The job's global step (steps of the whole world) after the last step.",
                value=stepped[-1].counters.global_step or 0,
            )
        with_scalars = [r for r in reports if r.counters.scalars]
        if with_scalars:
            family = GaugeMetricFamily(
                "edl_trainer_scalar",
                "The last value the script recorded of each scalar (recorder.scalar).",
                labels=["name"],
            )
            for name, value in with_scalars[-1].counters.scalars[:MAX_SCALARS]:
                if SCALAR_NAME.match(name):
                    family.add_metric([name], value)
            yield family
