"""What goes into one HPA sync and what comes out: settings, metric values, the decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edl_sim.hpa.replicas import PodMetric

ABLE_TO_SCALE = "AbleToScale"
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"


@dataclass(frozen=True)
class ControllerSettings:
    """kube-controller-manager flags that change HPA decisions (defaults of v1.35)."""

    sync_period: float = 15.0
    """--horizontal-pod-autoscaler-sync-period, seconds."""
    tolerance: float = 0.1
    """--horizontal-pod-autoscaler-tolerance."""
    downscale_stabilization: float = 300.0
    """--horizontal-pod-autoscaler-downscale-stabilization, seconds."""
    cpu_initialization_period: float = 300.0
    """--horizontal-pod-autoscaler-cpu-initialization-period, seconds (CPU only)."""
    initial_readiness_delay: float = 30.0
    """--horizontal-pod-autoscaler-initial-readiness-delay, seconds (CPU only)."""
    configurable_tolerance: bool = True
    """Feature gate HPAConfigurableTolerance: beta and on by default since 1.35 (per-HPA
    ``behavior.*.tolerance`` is read); alpha and off in 1.33-1.34, where the API server drops
    the field (model those with False)."""


@dataclass(frozen=True)
class MetricValues:
    """What the metrics APIs answer at one sync, all in milli-units.

    `pods`: metric name -> pod name -> value (custom.metrics pods/*). A pod without a value
    is a "missing" pod; a metric with no values at all is an error for that metric.
    `objects`: metric name -> value of the described object. `external`: metric name ->
    the items' values (summed by the controller). `resources`: resource name (or
    `container/resource`) -> pod name -> usage (int or `PodMetric` with a sample time).
    """

    pods: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    objects: Mapping[str, int] = field(default_factory=dict)
    external: Mapping[str, Sequence[int]] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, int | PodMetric]] = field(default_factory=dict)


@dataclass(frozen=True)
class Condition:
    """An HPA status condition as the controller would write it."""

    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class MetricStatus:
    """One metric's outcome this sync: its proposal and current value, or its error."""

    name: str
    proposal: int | None
    current: int | None = None
    utilization: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Decision:
    """The outcome of one reconcile.

    `desired_replicas` is what the scale is left at (== `current_replicas` when nothing
    changed, as in `status.desiredReplicas`). `metric_replicas` is the proposal before
    normalisation (None when metrics were not consulted or the sync froze) and
    `stabilized_replicas` the value after the stabilisation windows.
    """

    time: float
    current_replicas: int
    desired_replicas: int
    rescaled: bool
    reason: str
    metric: str
    metric_replicas: int | None
    stabilized_replicas: int | None
    metric_statuses: tuple[MetricStatus, ...]
    conditions: tuple[Condition, ...]
    error: str | None = None

    def condition(self, condition_type: str) -> Condition | None:
        """The condition of that type, if the controller has set it by now."""
        return next((c for c in self.conditions if c.type == condition_type), None)

    @property
    def limiting_reason(self) -> str:
        """`ScalingLimited` reason (DesiredWithinRange, ScaleUpLimit, TooFewReplicas...)."""
        limited = self.condition(SCALING_LIMITED)
        return limited.reason if limited else ""
