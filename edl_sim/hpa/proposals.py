"""From an HPA's metric specs and this sync's values to one replica count (or a freeze).

`computeReplicasForMetrics` in `horizontal.go`: each metric asks the `ReplicaCalculator`
for a proposal, the largest wins, and if any metric is unavailable while the rest would
scale down (or all are unavailable) the sync does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edl_sim.hpa.errors import MetricUnavailable
from edl_sim.hpa.replicas import (
    PodMetric,
    PodState,
    Proposal,
    ReplicaCalculator,
    Tolerances,
)
from edl_sim.hpa.spec import (
    ExternalMetricSource,
    MetricSourceType,
    MetricSpec,
    MetricTargetType,
    ObjectMetricSource,
    PodsMetricSource,
    ResourceMetricSource,
)
from edl_sim.hpa.sync import SCALING_ACTIVE, Condition, MetricStatus, MetricValues

_FAILED_REASON = {
    MetricSourceType.PODS: "FailedGetPodsMetric",
    MetricSourceType.OBJECT: "FailedGetObjectMetric",
    MetricSourceType.EXTERNAL: "FailedGetExternalMetric",
    MetricSourceType.RESOURCE: "FailedGetResourceMetric",
    MetricSourceType.CONTAINER_RESOURCE: "FailedGetContainerResourceMetric",
}


def _selector_text(selector: Mapping[str, Any] | None) -> str:
    """Approximates Go's `%+v` of a *LabelSelector in metric names."""
    if selector is None:
        return "<nil>"
    labels = selector.get("matchLabels") or {}
    label_text = "".join(f"{k}: {labels[k]}," for k in sorted(labels))
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{label_text}}},"
        "MatchExpressions:[]LabelSelectorRequirement{},}"
    )


def metric_description(metric: MetricSpec) -> str:
    """The name the controller uses in events and conditions (`pods metric x`, ...)."""
    source = metric.source
    if isinstance(source, PodsMetricSource):
        return f"pods metric {source.metric.name}"
    if isinstance(source, ObjectMetricSource):
        if source.target.type is MetricTargetType.VALUE:
            return f"{source.described_object.kind} metric {source.metric.name}"
        # the controller's own quirk: Object AverageValue is named like an external metric
        return f"external metric {source.metric.name}({_selector_text(source.metric.selector)})"
    if isinstance(source, ExternalMetricSource):
        return f"external metric {source.metric.name}({_selector_text(source.metric.selector)})"
    if source.target.type is MetricTargetType.AVERAGE_VALUE:
        return f"{source.name} resource"
    kind = "container resource" if source.container else "resource"
    return f"{source.name} {kind} utilization (percentage of request)"


@dataclass(frozen=True)
class MetricsOutcome:
    """The metrics' verdict for one sync.

    `frozen` means no scaling at all this sync (`replicas` is then -1). `error` is the
    controller's "invalid metrics (...)" text whenever a metric failed, frozen or not.
    """

    replicas: int
    metric: str
    statuses: tuple[MetricStatus, ...]
    scaling_active: Condition
    error: str | None
    frozen: bool


class MetricsEvaluator:
    """Turns metric specs plus this sync's values into `MetricsOutcome`."""

    def __init__(self, calculator: ReplicaCalculator) -> None:
        self._calculator = calculator

    def evaluate(
        self,
        specs: Sequence[MetricSpec],
        now: float,
        spec_replicas: int,
        status_replicas: int,
        values: MetricValues,
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> MetricsOutcome:
        """Max over the metrics' proposals, with the freeze rule."""
        replicas = 0
        metric_name = ""
        invalid = 0
        first_error: MetricUnavailable | None = None
        statuses: list[MetricStatus] = []
        for metric in specs:
            name = metric_description(metric)
            try:
                proposal = self._proposal(
                    now, metric, spec_replicas, status_replicas, values, pods, tolerances
                )
            except MetricUnavailable as e:
                if first_error is None:
                    first_error = MetricUnavailable(_FAILED_REASON[metric.type], e.message)
                invalid += 1
                statuses.append(MetricStatus(name, None, error=e.message))
                continue
            statuses.append(
                MetricStatus(name, proposal.replicas, proposal.usage, proposal.utilization)
            )
            if replicas == 0 or proposal.replicas > replicas:
                replicas = proposal.replicas
                metric_name = name
        error = None
        if first_error is not None:
            error = (
                f"invalid metrics ({invalid} invalid out of {len(specs)}), "
                f"first error is: {first_error.message}"
            )
        if invalid >= len(specs) or (invalid > 0 and replicas < spec_replicas):
            assert first_error is not None
            condition = Condition(
                SCALING_ACTIVE,
                False,
                first_error.reason,
                f"the HPA was unable to compute the replica count: {first_error.message}",
            )
            return MetricsOutcome(-1, "", tuple(statuses), condition, error, True)
        condition = Condition(
            SCALING_ACTIVE,
            True,
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {metric_name}",
        )
        return MetricsOutcome(replicas, metric_name, tuple(statuses), condition, error, False)

    def _proposal(
        self,
        now: float,
        metric: MetricSpec,
        spec_replicas: int,
        status_replicas: int,
        values: MetricValues,
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> Proposal:
        calc = self._calculator
        source = metric.source
        if isinstance(source, PodsMetricSource):
            pod_values = values.pods.get(source.metric.name)
            if not pod_values:
                raise MetricUnavailable(
                    "",
                    f"unable to get metric {source.metric.name}: "
                    "no metrics returned from custom metrics API",
                )
            target = source.target.average_value_milli
            assert target is not None
            return calc.pods_metric_replicas(spec_replicas, target, pod_values, pods, tolerances)
        if isinstance(source, ObjectMetricSource):
            if source.metric.name not in values.objects:
                raise MetricUnavailable(
                    "",
                    f"unable to get metric {source.metric.name}: "
                    f"{source.described_object.kind} {source.described_object.name}: "
                    "no metric value",
                )
            usage = values.objects[source.metric.name]
            if source.target.type is MetricTargetType.VALUE:
                assert source.target.value_milli is not None
                return calc.object_value_replicas(
                    spec_replicas, source.target.value_milli, usage, pods, tolerances
                )
            assert source.target.average_value_milli is not None
            return calc.per_pod_replicas(
                status_replicas, source.target.average_value_milli, usage, tolerances
            )
        if isinstance(source, ExternalMetricSource):
            items = values.external.get(source.metric.name)
            if not items:
                raise MetricUnavailable(
                    "",
                    f"unable to get external metric {source.metric.name}: "
                    "no metrics returned from external metrics API",
                )
            if source.target.average_value_milli is not None:
                return calc.external_per_pod_replicas(
                    status_replicas, source.target.average_value_milli, items, tolerances
                )
            assert source.target.value_milli is not None
            return calc.external_value_replicas(
                spec_replicas, source.target.value_milli, items, pods, tolerances
            )
        return self._resource_proposal(now, source, spec_replicas, values, pods, tolerances)

    def _resource_proposal(
        self,
        now: float,
        source: ResourceMetricSource,
        spec_replicas: int,
        values: MetricValues,
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> Proposal:
        key = f"{source.container}/{source.name}" if source.container else source.name
        raw = values.resources.get(key)
        if not raw:
            raise MetricUnavailable(
                "",
                f"unable to get metrics for resource {source.name}: "
                "no metrics returned from resource metrics API",
            )
        samples = {n: v if isinstance(v, PodMetric) else PodMetric(v) for n, v in raw.items()}
        target = source.target
        if target.type is MetricTargetType.AVERAGE_VALUE:
            assert target.average_value_milli is not None
            return self._calculator.raw_resource_replicas(
                spec_replicas,
                target.average_value_milli,
                source.name,
                samples,
                pods,
                tolerances,
                now,
            )
        assert target.average_utilization is not None
        return self._calculator.resource_replicas(
            spec_replicas,
            target.average_utilization,
            source.name,
            samples,
            pods,
            tolerances,
            now,
            source.container,
        )
