"""Durable checkpoint metrics, from the trainer's `checkpoints-*.json` reports.

Counters and the histogram are summed over every incarnation's file (a restarted trainer
never makes them go back); the last step and time are those of the newest checkpoint any
incarnation wrote or restored from. Only rank 0 of a generation writes checkpoints, so for a
job the freshest pod is what counts: ``min(edl_trainer_checkpoint_age_seconds)`` over the
job's pods (docs/elastic.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agent.checkpoints.stats import CHECKPOINT_BUCKETS, read_stats
from agent.collectors.health import CollectorHealth

_COUNTERS = (
    ("bytes", "Bytes of durable checkpoints written (payload and manifest)."),
    ("stall_seconds", "Of the checkpoint time, what the training thread waited (state copy)."),
    ("failures", "Durable checkpoint writes that failed."),
    ("invalid", "Checkpoints found corrupt or partial on restore (the previous one was used)."),
)
"""`CheckpointCounts` attribute -> `edl_trainer_checkpoint_<attr>_total`."""


class CheckpointCollector(Collector):
    """Reads `metrics_dir` at each scrape; exports nothing before a trainer checkpointed."""

    NAME = "checkpoints"

    def __init__(
        self, metrics_dir: Path, health: CollectorHealth, wall: Callable[[], float] = time.time
    ) -> None:
        self._dir = metrics_dir
        self._health = health
        self._wall = wall

    def collect(self) -> Iterable[Metric]:
        """Yields the checkpoint histogram, counters and the newest checkpoint's step and age."""
        found, errors = read_stats(self._dir)
        if errors:
            self._health.record_error(self.NAME, len(errors))
        if not found:
            return
        counts = [sum(column) for column in zip(*(c.bucket_counts for c in found), strict=True)]
        cumulative, buckets = 0, []
        for bound, n in zip((*CHECKPOINT_BUCKETS, float("inf")), counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        yield HistogramMetricFamily(
            "edl_trainer_checkpoint_seconds",
            "Time to write one durable checkpoint: copy of the state to commit of its manifest.",
            buckets=buckets,
            sum_value=sum(c.seconds_sum for c in found),
        )
        for attr, doc in _COUNTERS:
            yield CounterMetricFamily(
                f"edl_trainer_checkpoint_{attr}_total",
                doc,
                value=sum(getattr(c, attr) for c in found),
            )
        newest = max(
            (c for c in found if c.last_unix is not None and c.last_step is not None),
            key=lambda c: c.last_unix or 0.0,
            default=None,
        )
        if newest is None or newest.last_unix is None or newest.last_step is None:
            return
        yield GaugeMetricFamily(
            "edl_trainer_checkpoint_last_step",
            "Global step of the newest durable checkpoint this pod wrote or restored from.",
            value=newest.last_step,
        )
        yield GaugeMetricFamily(
            "edl_trainer_checkpoint_last_timestamp_seconds",
            "Unix time that checkpoint was committed.",
            value=newest.last_unix,
        )
        yield GaugeMetricFamily(
            "edl_trainer_checkpoint_age_seconds",
            "Seconds since that checkpoint was committed (what a job loses if every pod dies now).",
            value=max(0.0, self._wall() - newest.last_unix),
        )
