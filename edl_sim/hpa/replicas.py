"""`ReplicaCalculator`: one metric's replica proposal, as kube-controller-manager computes it.

All values are milli-units (`Quantity.MilliValue()`), averages use int64 division, ratios are
float64 and replica counts are `ceil(ratio * pods)` -- the same arithmetic as
`pkg/controller/podautoscaler/replica_calculator.go`, so the model agrees with the real
controller decision for decision rather than "approximately".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from edl_sim.hpa.errors import MetricUnavailable

MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1


class PodPhase(StrEnum):
    """`pod.status.phase`."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class PodState:
    """What the controller's pod lister knows about one pod matched by the scale selector.

    `ready` is the status of the PodReady condition (None: no such condition). Start and
    transition times only matter for CPU metrics (initialisation period rules). `requests`
    maps a resource name (or `container/resource` for ContainerResource metrics) to the
    pod's request in milli-units.
    """

    name: str
    phase: PodPhase = PodPhase.RUNNING
    ready: bool | None = True
    deleting: bool = False
    start_time: float | None = None
    ready_transition_time: float | None = None
    requests: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PodMetric:
    """One pod's resource sample: milli value, sample time and window (CPU readiness rules)."""

    value: int
    timestamp: float | None = None
    window: float = 60.0


@dataclass(frozen=True)
class Tolerances:
    """Ratio band inside which the controller keeps the current count (inclusive bounds)."""

    scale_down: float = 0.1
    scale_up: float = 0.1

    def is_within(self, ratio: float) -> bool:
        """True when `1 - down <= ratio <= 1 + up`, i.e. the change would be too small."""
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True)
class Proposal:
    """A metric's replica proposal and the current value it reports in HPA status."""

    replicas: int
    usage: int
    utilization: int | None = None


@dataclass(frozen=True)
class PodGroups:
    """Result of `groupPods`: ready count and the unready, missing and ignored pod names."""

    ready_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    ignored: frozenset[str]


def int_div(a: int, b: int) -> int:
    """Go's int64 division: truncates toward zero (Python's // floors)."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _ceil_int32(x: float) -> int:
    if math.isnan(x):
        return 0
    if x > MAX_INT32:
        return MAX_INT32
    return math.ceil(x)


def _ratio(numerator: float, denominator: float) -> float:
    """float64 division with Go's results for a zero denominator (Inf or NaN, never raise)."""
    num, den = float(numerator), float(denominator)
    if den == 0:
        if num == 0:
            return math.nan
        return math.inf if num > 0 else -math.inf
    return num / den


class ReplicaCalculator:
    """Per-metric replica proposals; the CPU readiness periods are the controller's flags."""

    def __init__(
        self, cpu_initialization_period: float = 300.0, initial_readiness_delay: float = 30.0
    ) -> None:
        self._cpu_init = cpu_initialization_period
        self._readiness_delay = initial_readiness_delay

    # -- pod grouping -------------------------------------------------------------------------

    def group_pods(
        self,
        pods: Sequence[PodState],
        metrics: Mapping[str, PodMetric],
        resource: str,
        now: float,
    ) -> PodGroups:
        """Split the selector's pods into ready / unready / missing / ignored (`groupPods`)."""
        ready = 0
        unready: set[str] = set()
        missing: set[str] = set()
        ignored: set[str] = set()
        for pod in pods:
            if pod.deleting or pod.phase is PodPhase.FAILED:
                ignored.add(pod.name)
                continue
            if pod.phase is PodPhase.PENDING:
                unready.add(pod.name)
                continue
            metric = metrics.get(pod.name)
            if metric is None:
                missing.add(pod.name)
                continue
            if resource == "cpu" and self._cpu_unready(pod, metric, now):
                unready.add(pod.name)
                continue
            ready += 1
        return PodGroups(ready, frozenset(unready), frozenset(missing), frozenset(ignored))

    def _cpu_unready(self, pod: PodState, metric: PodMetric, now: float) -> bool:
        if pod.ready is None or pod.start_time is None:
            return True
        transition = pod.ready_transition_time if pod.ready_transition_time is not None else 0.0
        if pod.start_time + self._cpu_init > now:
            sample_time = metric.timestamp if metric.timestamp is not None else now
            return pod.ready is False or sample_time < transition + metric.window
        return pod.ready is False and pod.start_time + self._readiness_delay > transition

    # -- plain (Pods, Resource AverageValue) ----------------------------------------------------

    def pods_metric_replicas(
        self,
        current_replicas: int,
        target_milli: int,
        values: Mapping[str, int],
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> Proposal:
        """Pods metric with an AverageValue target (`GetMetricReplicas`)."""
        metrics = {name: PodMetric(v) for name, v in values.items()}
        return self._plain(current_replicas, target_milli, metrics, pods, tolerances, "", 0.0)

    def raw_resource_replicas(
        self,
        current_replicas: int,
        target_milli: int,
        resource: str,
        values: Mapping[str, PodMetric],
        pods: Sequence[PodState],
        tolerances: Tolerances,
        now: float,
    ) -> Proposal:
        """Resource metric with an AverageValue target (`GetRawResourceReplicas`)."""
        return self._plain(current_replicas, target_milli, values, pods, tolerances, resource, now)

    def _counted_metrics(
        self,
        pods: Sequence[PodState],
        values: Mapping[str, PodMetric],
        resource: str,
        now: float,
    ) -> tuple[PodGroups, dict[str, int]]:
        """Group the pods and keep the values that count (neither ignored nor unready).

        Raises:
            MetricUnavailable: no pods, or no pod with a value that counts; the messages are
                the controller's own.
        """
        if not pods:
            raise MetricUnavailable(
                "", "no pods returned by selector while calculating replica count"
            )
        groups = self.group_pods(pods, values, resource, now)
        metrics = {
            name: m.value
            for name, m in values.items()
            if name not in groups.ignored and name not in groups.unready
        }
        if not metrics:
            raise MetricUnavailable(
                "", "did not receive metrics for targeted pods (pods might be unready)"
            )
        return groups, metrics

    def _plain(
        self,
        current_replicas: int,
        target: int,
        values: Mapping[str, PodMetric],
        pods: Sequence[PodState],
        tolerances: Tolerances,
        resource: str,
        now: float,
    ) -> Proposal:
        groups, metrics = self._counted_metrics(pods, values, resource, now)
        usage = int_div(sum(metrics.values()), len(metrics))
        ratio = _ratio(usage, target)
        scale_up_with_unready = bool(groups.unready) and ratio > 1.0
        if not scale_up_with_unready and not groups.missing:
            if tolerances.is_within(ratio):
                return Proposal(current_replicas, usage)
            return Proposal(_ceil_int32(ratio * groups.ready_count), usage)
        if groups.missing:
            if ratio < 1.0:
                for name in groups.missing:
                    metrics[name] = target
            elif ratio > 1.0:
                for name in groups.missing:
                    metrics[name] = 0
        if scale_up_with_unready:
            for name in groups.unready:
                metrics[name] = 0
        new_ratio = _ratio(int_div(sum(metrics.values()), len(metrics)), target)
        return Proposal(
            self._rebalanced(current_replicas, ratio, new_ratio, len(metrics), tolerances), usage
        )

    @staticmethod
    def _rebalanced(
        current_replicas: int, ratio: float, new_ratio: float, count: int, tolerances: Tolerances
    ) -> int:
        """Keep the count when the filled-in ratio is small or flips the scale direction."""
        if (
            tolerances.is_within(new_ratio)
            or (ratio < 1.0 and new_ratio > 1.0)
            or (ratio > 1.0 and new_ratio < 1.0)
        ):
            return current_replicas
        new_replicas = _ceil_int32(new_ratio * count)
        if (new_ratio < 1.0 and new_replicas > current_replicas) or (
            new_ratio > 1.0 and new_replicas < current_replicas
        ):
            return current_replicas
        return new_replicas

    # -- Resource Utilization -----------------------------------------------------------------

    def resource_replicas(
        self,
        current_replicas: int,
        target_utilization: int,
        resource: str,
        values: Mapping[str, PodMetric],
        pods: Sequence[PodState],
        tolerances: Tolerances,
        now: float,
        container: str = "",
    ) -> Proposal:
        """Resource metric with a Utilization target (`GetResourceReplicas`)."""
        groups, metrics = self._counted_metrics(pods, values, resource, now)
        key = f"{container}/{resource}" if container else resource
        requests: dict[str, int] = {}
        for pod in pods:
            if key not in pod.requests:
                raise MetricUnavailable("", f"missing request for {resource} in Pod {pod.name}")
            requests[pod.name] = pod.requests[key]
        ratio, utilization, raw = self._utilization(metrics, requests, target_utilization)
        scale_up_with_unready = bool(groups.unready) and ratio > 1.0
        if not scale_up_with_unready and not groups.missing:
            if tolerances.is_within(ratio):
                return Proposal(current_replicas, raw, utilization)
            return Proposal(_ceil_int32(ratio * groups.ready_count), raw, utilization)
        if groups.missing:
            if ratio < 1.0:
                fallback = max(100, target_utilization)
                for name in groups.missing:
                    metrics[name] = int_div(requests[name] * fallback, 100)
            elif ratio > 1.0:
                for name in groups.missing:
                    metrics[name] = 0
        if scale_up_with_unready:
            for name in groups.unready:
                metrics[name] = 0
        new_ratio, _, _ = self._utilization(metrics, requests, target_utilization)
        replicas = self._rebalanced(current_replicas, ratio, new_ratio, len(metrics), tolerances)
        return Proposal(replicas, raw, utilization)

    @staticmethod
    def _utilization(
        metrics: Mapping[str, int], requests: Mapping[str, int], target: int
    ) -> tuple[float, int, int]:
        """`GetResourceUtilizationRatio`: integer percent of the summed requests."""
        total = 0
        requested = 0
        entries = 0
        for name, value in metrics.items():
            if name not in requests:
                continue
            total += value
            requested += requests[name]
            entries += 1
        if requested == 0:
            raise MetricUnavailable("", "no metrics returned matched known pods")
        utilization = int_div(total * 100, requested)
        return _ratio(utilization, target), utilization, int_div(total, entries)

    # -- Object / External --------------------------------------------------------------------

    def object_value_replicas(
        self,
        current_replicas: int,
        target_milli: int,
        usage: int,
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> Proposal:
        """Object metric with a Value target (`GetObjectMetricReplicas`): scales ready pods."""
        replicas = self._usage_ratio_replicas(
            current_replicas, _ratio(usage, target_milli), pods, tolerances
        )
        return Proposal(replicas, usage)

    def external_value_replicas(
        self,
        current_replicas: int,
        target_milli: int,
        items: Sequence[int],
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> Proposal:
        """External metric with a Value target: the items are summed, then like Object Value."""
        usage = 0
        for value in items:
            if value > 0 and usage > MAX_INT64 - value:
                usage = MAX_INT64
                break
            usage += value
        replicas = self._usage_ratio_replicas(
            current_replicas, _ratio(usage, target_milli), pods, tolerances
        )
        return Proposal(replicas, usage)

    @staticmethod
    def _usage_ratio_replicas(
        current_replicas: int, ratio: float, pods: Sequence[PodState], tolerances: Tolerances
    ) -> int:
        if current_replicas == 0:
            return _ceil_int32(ratio)
        if tolerances.is_within(ratio):
            return current_replicas
        if not pods:
            raise MetricUnavailable(
                "",
                "unable to calculate ready pods: no pods returned by selector while "
                "calculating replica count",
            )
        ready = sum(1 for pod in pods if pod.phase is PodPhase.RUNNING and pod.ready is True)
        return _ceil_int32(ratio * ready)

    @staticmethod
    def per_pod_replicas(
        status_replicas: int, target_milli: int, usage: int, tolerances: Tolerances
    ) -> Proposal:
        """Object/External AverageValue target: pods are not looked at, status.replicas is."""
        replicas = status_replicas
        ratio = _ratio(usage, float(target_milli) * float(status_replicas))
        if not tolerances.is_within(ratio):
            replicas = _ceil_int32(_ratio(usage, target_milli))
        average = usage if status_replicas == 0 else math.ceil(_ratio(usage, status_replicas))
        return Proposal(replicas, int(average))

    def external_per_pod_replicas(
        self, status_replicas: int, target_milli: int, items: Sequence[int], tolerances: Tolerances
    ) -> Proposal:
        """External metric with an AverageValue target (items summed, capped at MaxInt64)."""
        usage = 0
        for value in items:
            usage += value
            if usage > MAX_INT64:
                usage = MAX_INT64
                break
        return self.per_pod_replicas(status_replicas, target_milli, usage, tolerances)
