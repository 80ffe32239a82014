"""The sizer's series on the adapter's ``/metrics`` (names and labels: docs/metrics-contract.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from edl_sizing.decision import Plan, Reason
from edl_sizing.resources import GPU, Resources

_JOB = ["namespace", "job", "deployment"]
ROUND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""A round must stay far below ``--sizing-interval`` (10 s by default)."""


class SizingMetrics:
    """Gauges per job (removed when the job goes), cluster totals, counters."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def job_gauge(name: str, text: str) -> Gauge:
            return Gauge(f"edl_adapter_sizing_{name}", text, _JOB, registry=registry)

        self.desired = job_gauge("desired_replicas", "Replicas desired_replicas serves the job.")
        self.current = job_gauge("current_replicas", "The job's replicas at the decision.")
        self.min = job_gauge("min_replicas", "The job's minimum workers.")
        self.max = job_gauge("max_replicas", "The job's maximum workers.")
        self.marginal = job_gauge(
            "marginal_speedup", "Fitted gain of one more worker, relative to one worker."
        )
        self.limited_by = Gauge(
            "edl_adapter_sizing_limited_by",
            "1 for what stopped the job at its size in the last decision.",
            [*_JOB, "reason"],
            registry=registry,
        )
        self.free = Gauge(
            "edl_adapter_sizing_free",
            "Free room over schedulable nodes after headroom (cores, bytes, devices).",
            ["resource"],
            registry=registry,
        )
        self.allocatable = Gauge(
            "edl_adapter_sizing_allocatable",
            "Allocatable over schedulable nodes (cores, bytes, devices).",
            ["resource"],
            registry=registry,
        )
        self.protected = Gauge(
            "edl_adapter_sizing_protected_pending_pods",
            "Pending pods of priority at least a job's, placed before any job grows.",
            registry=registry,
        )
        self.decisions = Counter(
            "edl_adapter_sizing_decisions", "Sizing rounds completed.", registry=registry
        )
        self.errors = Counter(
            "edl_adapter_sizing_errors",
            "Inputs the sizer refused, by reason (each also an Event on the Deployment).",
            ["reason"],
            registry=registry,
        )
        self.round_seconds = Histogram(
            "edl_adapter_sizing_round_seconds",
            "Time a sizing round took, by part: the cluster view (snapshot), the decision "
            "with the jobs' history (decide), the whole round (round).",
            ["part"],
            buckets=ROUND_BUCKETS,
            registry=registry,
        )
        self.round_cpu_seconds = Histogram(
            "edl_adapter_sizing_round_cpu_seconds",
            "CPU time the sizing thread spent on a round (below its duration when the "
            "process waited for a core or for the interpreter lock).",
            buckets=ROUND_BUCKETS,
            registry=registry,
        )
        self._labels: dict[str, tuple[str, str, str]] = {}
        self._series: dict[tuple[str, str, str], _JobSeries] = {}
        """Each job's labelled series, looked up once (not 15 lookups per job per round)."""

    def timed(self, snapshot_s: float, decide_s: float, round_s: float, cpu_s: float) -> None:
        """One round's durations and its CPU time (seconds)."""
        self.round_seconds.labels("snapshot").observe(snapshot_s)
        self.round_seconds.labels("decide").observe(decide_s)
        self.round_seconds.labels("round").observe(round_s)
        self.round_cpu_seconds.observe(cpu_s)

    def publish(self, plan: Plan, names: Mapping[str, str]) -> None:
        """Set every series from one plan; jobs no longer planned lose their series."""
        self.decisions.inc()
        _set_resources(self.free, plan.free)
        _set_resources(self.allocatable, plan.allocatable)
        self.protected.set(len(plan.protected))
        fresh: dict[str, tuple[str, str, str]] = {}
        for key, d in plan.jobs.items():
            namespace, _, deployment = key.partition("/")
            labels = (namespace, names.get(key, deployment), deployment)
            fresh[key] = labels
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = self._job_series(labels)
            series.desired.set(d.desired)
            series.current.set(d.current)
            series.min.set(d.min_replicas)
            series.max.set(d.max_replicas)
            series.marginal.set(d.marginal_speedup)
            for reason, gauge in series.limited_by:
                gauge.set(d.limited_by is reason)
        for key, labels in self._labels.items():
            if fresh.get(key) != labels:
                for job_gauge in (self.desired, self.current, self.min, self.max, self.marginal):
                    job_gauge.remove(*labels)
                for reason in Reason:
                    self.limited_by.remove(*labels, reason.value)
                self._series.pop(labels, None)
        self._labels = fresh

    def _job_series(self, labels: tuple[str, str, str]) -> _JobSeries:
        return _JobSeries(
            self.desired.labels(*labels),
            self.current.labels(*labels),
            self.min.labels(*labels),
            self.max.labels(*labels),
            self.marginal.labels(*labels),
            tuple((r, self.limited_by.labels(*labels, r.value)) for r in Reason),
        )


@dataclass(frozen=True, slots=True)
class _JobSeries:
    """One job's labelled gauges."""

    desired: Gauge
    current: Gauge
    min: Gauge
    max: Gauge
    marginal: Gauge
    limited_by: tuple[tuple[Reason, Gauge], ...]


def _set_resources(gauge: Gauge, r: Resources) -> None:
    gauge.labels("cpu").set(r.cpu)
    gauge.labels("memory").set(r.memory)
    gauge.labels(GPU).set(r.gpu)
