"""Typed `autoscaling/v2` HorizontalPodAutoscaler spec, with the API server's v2 defaulting.

Field names follow the Kubernetes API (snake_case). Quantities are kept as milli-values
(`Quantity.MilliValue()`), which is exactly what the controller feeds its calculator.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from enum import StrEnum
from typing import Any


class MetricSourceType(StrEnum):
    """`spec.metrics[].type`."""

    OBJECT = "Object"
    PODS = "Pods"
    RESOURCE = "Resource"
    CONTAINER_RESOURCE = "ContainerResource"
    EXTERNAL = "External"


class MetricTargetType(StrEnum):
    """`target.type` of a metric."""

    UTILIZATION = "Utilization"
    VALUE = "Value"
    AVERAGE_VALUE = "AverageValue"


class PolicyType(StrEnum):
    """`behavior.*.policies[].type`."""

    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(StrEnum):
    """`behavior.*.selectPolicy`."""

    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


@dataclass(frozen=True)
class CrossVersionObjectReference:
    """`scaleTargetRef` / `describedObject`."""

    kind: str
    name: str
    api_version: str = ""


@dataclass(frozen=True)
class MetricIdentifier:
    """Metric name plus the optional label selector (kept as the raw mapping)."""

    name: str
    selector: dict[str, Any] | None = None


@dataclass(frozen=True)
class MetricTarget:
    """What the metric is compared with; only the field named by `type` is meaningful."""

    type: MetricTargetType
    value_milli: int | None = None
    average_value_milli: int | None = None
    average_utilization: int | None = None


@dataclass(frozen=True)
class ObjectMetricSource:
    """A metric describing one Kubernetes object (e.g. the trainer Deployment)."""

    described_object: CrossVersionObjectReference
    metric: MetricIdentifier
    target: MetricTarget


@dataclass(frozen=True)
class PodsMetricSource:
    """A per-pod metric averaged over the target's pods."""

    metric: MetricIdentifier
    target: MetricTarget


@dataclass(frozen=True)
class ResourceMetricSource:
    """A resource (cpu, memory) of the pods, from the resource metrics API."""

    name: str
    target: MetricTarget
    container: str = ""


@dataclass(frozen=True)
class ExternalMetricSource:
    """A metric of something outside the cluster's objects (summed over its items)."""

    metric: MetricIdentifier
    target: MetricTarget


MetricSource = ObjectMetricSource | PodsMetricSource | ResourceMetricSource | ExternalMetricSource


@dataclass(frozen=True)
class MetricSpec:
    """One entry of `spec.metrics`; `source` is the member named by `type`."""

    type: MetricSourceType
    source: MetricSource

    @property
    def metric_name(self) -> str:
        """Name used for trace lookup: the metric name, or the resource name for resources."""
        if isinstance(self.source, ResourceMetricSource):
            return self.source.name
        return self.source.metric.name


@dataclass(frozen=True)
class ScalingPolicy:
    """One rate limit: change by `value` pods or percent per `period_seconds`."""

    type: PolicyType
    value: int
    period_seconds: int


@dataclass(frozen=True)
class ScalingRules:
    """`HPAScalingRules`; `None` means "not set" so defaulting can tell set from unset."""

    stabilization_window_seconds: int | None = None
    select_policy: SelectPolicy | None = None
    policies: tuple[ScalingPolicy, ...] | None = None
    tolerance: Decimal | None = None


@dataclass(frozen=True)
class Behavior:
    """`spec.behavior`: rules for each direction."""

    scale_up: ScalingRules | None = None
    scale_down: ScalingRules | None = None


DEFAULT_SCALE_UP = ScalingRules(
    stabilization_window_seconds=0,
    select_policy=SelectPolicy.MAX,
    policies=(
        ScalingPolicy(PolicyType.PODS, 4, 15),
        ScalingPolicy(PolicyType.PERCENT, 100, 15),
    ),
)
# The scale-down window stays unset: the controller fills it from its flag at each sync.
DEFAULT_SCALE_DOWN = ScalingRules(
    stabilization_window_seconds=None,
    select_policy=SelectPolicy.MAX,
    policies=(ScalingPolicy(PolicyType.PERCENT, 100, 15),),
)


def _copy_rules(given: ScalingRules | None, default: ScalingRules) -> ScalingRules:
    """Field-by-field merge, like `copyHPAScalingRules` in the API server's v2 defaults."""
    if given is None:
        return default
    return ScalingRules(
        stabilization_window_seconds=(
            given.stabilization_window_seconds
            if given.stabilization_window_seconds is not None
            else default.stabilization_window_seconds
        ),
        select_policy=given.select_policy or default.select_policy,
        policies=given.policies if given.policies is not None else default.policies,
        tolerance=given.tolerance if given.tolerance is not None else default.tolerance,
    )


def default_behavior(behavior: Behavior | None) -> Behavior | None:
    """Apply v2 defaulting; a nil behavior stays nil (the controller then uses the legacy path)."""
    if behavior is None:
        return None
    return Behavior(
        scale_up=_copy_rules(behavior.scale_up, DEFAULT_SCALE_UP),
        scale_down=_copy_rules(behavior.scale_down, DEFAULT_SCALE_DOWN),
    )


@dataclass(frozen=True)
class HorizontalPodAutoscalerSpec:
    """`spec` of an `autoscaling/v2` HPA."""

    scale_target_ref: CrossVersionObjectReference
    max_replicas: int
    min_replicas: int | None = None
    metrics: tuple[MetricSpec, ...] = ()
    behavior: Behavior | None = None

    def defaulted(self) -> HorizontalPodAutoscalerSpec:
        """The spec as the API server stores it: minReplicas 1, cpu 80 %, behavior filled."""
        metrics = self.metrics or (
            MetricSpec(
                MetricSourceType.RESOURCE,
                ResourceMetricSource(
                    "cpu", MetricTarget(MetricTargetType.UTILIZATION, average_utilization=80)
                ),
            ),
        )
        return replace(
            self,
            min_replicas=1 if self.min_replicas is None else self.min_replicas,
            metrics=metrics,
            behavior=default_behavior(self.behavior),
        )


@dataclass(frozen=True)
class HorizontalPodAutoscaler:
    """A parsed HPA manifest; `document` keeps the original mapping for faithful re-printing."""

    name: str
    namespace: str
    spec: HorizontalPodAutoscalerSpec
    document: dict[str, Any] = field(default_factory=dict, compare=False)
