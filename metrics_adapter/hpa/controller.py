"""`HorizontalController`: one HPA's reconcile loop, steppable one sync at a time.

This is the part of kube-controller-manager's `horizontal.go` that decides a replica count:
min/max branches, multi-metric max with the freeze rule, the legacy normalisation (no
`behavior`) and the `behavior` normalisation (stabilisation windows over a recommendation
history, Pods/Percent policies over a scale-event history, selectPolicy), and the conditions
the real controller writes. Reading the scale, listing pods and fetching metrics are the
caller's job: `step()` takes them as arguments, so a test can feed the same values to the
model and to a real controller and compare decisions.

Timing note: recommendations and scale events are compared with their windows strictly
(an entry exactly `window` seconds old is out). The real controller's syncs are a few
milliseconds longer than the sync period, so on an ideal 15 s grid this is what it does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metrics_adapter.hpa.errors import MetricUnavailable
from metrics_adapter.hpa.replicas import (
    PodMetric,
    PodState,
    Proposal,
    ReplicaCalculator,
    Tolerances,
)
from metrics_adapter.hpa.spec import (
    Behavior,
    ExternalMetricSource,
    HorizontalPodAutoscalerSpec,
    MetricSourceType,
    MetricSpec,
    MetricTargetType,
    ObjectMetricSource,
    PodsMetricSource,
    PolicyType,
    ResourceMetricSource,
    ScalingRules,
    SelectPolicy,
)

ABLE_TO_SCALE = "AbleToScale"
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
MIN_INT32 = -(2**31)
_HIGHER = (
    "recent recommendations were higher than current one, "
    "applying the highest recent recommendation"
)
_LOWER = (
    "recent recommendations were lower than current one, applying the lowest recent recommendation"
)
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class ControllerSettings:
    """kube-controller-manager flags that change HPA decisions (defaults of v1.34)."""

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
    configurable_tolerance: bool = False
    """Feature gate HPAConfigurableTolerance (alpha, off by default in 1.34)."""


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
class Recommendation:
    """An unstabilised recommendation kept for the stabilisation windows."""

    replicas: int
    timestamp: float


@dataclass
class ScaleEvent:
    """A past rescale (absolute change) kept for the policies' periods."""

    replica_change: int
    timestamp: float
    outdated: bool = False


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
        return f"external metric {source.metric.name}({_selector_text(source.metric.selector)})"
    if isinstance(source, ExternalMetricSource):
        return f"external metric {source.metric.name}({_selector_text(source.metric.selector)})"
    if source.target.type is MetricTargetType.AVERAGE_VALUE:
        return f"{source.name} resource"
    kind = "container resource" if source.container else "resource"
    return f"{source.name} {kind} utilization (percentage of request)"


_FAILED_REASON = {
    MetricSourceType.PODS: "FailedGetPodsMetric",
    MetricSourceType.OBJECT: "FailedGetObjectMetric",
    MetricSourceType.EXTERNAL: "FailedGetExternalMetric",
    MetricSourceType.RESOURCE: "FailedGetResourceMetric",
    MetricSourceType.CONTAINER_RESOURCE: "FailedGetContainerResourceMetric",
}


def default_pods(count: int) -> tuple[PodState, ...]:
    """`count` Running, Ready pods named pod-0, pod-1, ... (what `step` assumes by default)."""
    return tuple(PodState(f"pod-{i}") for i in range(count))


class HorizontalController:
    """The HPA controller's decision logic for one HPA, with its in-memory history.

    Construct it with the HPA spec as written (defaulting is applied here, like the API
    server does on create), the controller flags and the HPA's creation time; then call
    `step()` at each sync time (`sync_times()` yields the real schedule: the first reconcile
    comes one sync period after creation).
    """

    def __init__(
        self,
        spec: HorizontalPodAutoscalerSpec,
        settings: ControllerSettings | None = None,
        calculator: ReplicaCalculator | None = None,
        created_at: float = 0.0,
    ) -> None:
        self.settings = settings or ControllerSettings()
        self.spec = spec.defaulted()
        self.created_at = created_at
        self._calculator = calculator or ReplicaCalculator(
            self.settings.cpu_initialization_period, self.settings.initial_readiness_delay
        )
        self.recommendations: list[Recommendation] = []
        self.scale_up_events: list[ScaleEvent] = []
        self.scale_down_events: list[ScaleEvent] = []
        self._conditions: dict[str, Condition] = {}
        self.last_scale_time: float | None = None

    # -- schedule ---------------------------------------------------------------------------

    def sync_times(self, until: float) -> Iterator[float]:
        """Times of the reconciles up to `until`: created_at + k * sync_period, k >= 1."""
        k = 1
        while True:
            t = self.created_at + k * self.settings.sync_period
            if t > until + 1e-9:
                return
            yield t
            k += 1

    def reset(self) -> None:
        """Forget the in-memory history, as a kube-controller-manager restart does."""
        self.recommendations.clear()
        self.scale_up_events.clear()
        self.scale_down_events.clear()
        self._conditions.clear()

    # -- one sync ---------------------------------------------------------------------------

    def step(
        self,
        now: float,
        current_replicas: int,
        metrics: MetricValues,
        pods: Sequence[PodState] | None = None,
        status_replicas: int | None = None,
    ) -> Decision:
        """Reconcile once at `now` (seconds) and return the decision.

        `current_replicas` is the scale's spec.replicas, `status_replicas` its
        status.replicas (defaults to the same), `pods` what the selector lists (defaults to
        `default_pods(current_replicas)`).
        """
        pod_list = tuple(pods) if pods is not None else default_pods(current_replicas)
        status = current_replicas if status_replicas is None else status_replicas
        self._set(
            ABLE_TO_SCALE,
            True,
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
        )
        if not self.recommendations:
            self.recommendations.append(Recommendation(current_replicas, now))
        spec = self.spec
        min_replicas = spec.min_replicas if spec.min_replicas is not None else 1
        metric_replicas: int | None = None
        stabilized: int | None = None
        statuses: tuple[MetricStatus, ...] = ()
        metric_name = ""
        reason = ""
        error: str | None = None
        rescale = True
        desired = 0
        if current_replicas == 0 and min_replicas != 0:
            rescale = False
            self._set(
                SCALING_ACTIVE,
                False,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            )
        elif current_replicas > spec.max_replicas:
            reason = "Current number of replicas above Spec.MaxReplicas"
            desired = spec.max_replicas
        elif current_replicas < min_replicas:
            reason = "Current number of replicas below Spec.MinReplicas"
            desired = min_replicas
        else:
            proposal, metric_name, statuses, error, frozen = self._compute_replicas_for_metrics(
                now, current_replicas, status, metrics, pod_list
            )
            if frozen:
                return self._decision(
                    now,
                    current_replicas,
                    current_replicas,
                    False,
                    "",
                    "",
                    None,
                    None,
                    statuses,
                    error,
                )
            metric_replicas = proposal
            desired = max(0, proposal)
            if desired > current_replicas:
                reason = f"{metric_name} above target"
            elif desired < current_replicas:
                reason = "All metrics below target"
            if spec.behavior is None:
                desired, stabilized = self._normalize_legacy(
                    now, current_replicas, desired, min_replicas
                )
            else:
                desired, stabilized = self._normalize_with_behavior(
                    now, spec.behavior, current_replicas, desired, min_replicas
                )
            rescale = desired != current_replicas
        if rescale:
            self._set(
                ABLE_TO_SCALE,
                True,
                "SucceededRescale",
                f"the HPA controller was able to update the target scale to {desired}",
            )
            self._store_scale_event(now, current_replicas, desired)
            self.last_scale_time = now
        else:
            desired = current_replicas
        return self._decision(
            now,
            current_replicas,
            desired,
            rescale,
            reason,
            metric_name,
            metric_replicas,
            stabilized,
            statuses,
            error,
        )

    def _decision(
        self,
        now: float,
        current: int,
        desired: int,
        rescaled: bool,
        reason: str,
        metric: str,
        metric_replicas: int | None,
        stabilized: int | None,
        statuses: tuple[MetricStatus, ...],
        error: str | None,
    ) -> Decision:
        return Decision(
            time=now,
            current_replicas=current,
            desired_replicas=desired,
            rescaled=rescaled,
            reason=reason,
            metric=metric,
            metric_replicas=metric_replicas,
            stabilized_replicas=stabilized,
            metric_statuses=statuses,
            conditions=tuple(self._conditions.values()),
            error=error,
        )

    def _set(self, condition_type: str, status: bool, reason: str, message: str) -> None:
        self._conditions[condition_type] = Condition(condition_type, status, reason, message)

    # -- metrics ----------------------------------------------------------------------------

    def _tolerances(self) -> Tolerances:
        flag = self.settings.tolerance
        behavior = self.spec.behavior
        if not self.settings.configurable_tolerance or behavior is None:
            return Tolerances(flag, flag)
        up = behavior.scale_up.tolerance if behavior.scale_up else None
        down = behavior.scale_down.tolerance if behavior.scale_down else None
        return Tolerances(
            scale_down=flag if down is None else float(down),
            scale_up=flag if up is None else float(up),
        )

    def _compute_replicas_for_metrics(
        self,
        now: float,
        spec_replicas: int,
        status_replicas: int,
        metrics: MetricValues,
        pods: Sequence[PodState],
    ) -> tuple[int, str, tuple[MetricStatus, ...], str | None, bool]:
        """Max over the metrics' proposals; returns (replicas, metric, statuses, error, frozen)."""
        tolerances = self._tolerances()
        replicas = 0
        metric_name = ""
        invalid = 0
        first_error: MetricUnavailable | None = None
        statuses: list[MetricStatus] = []
        for metric in self.spec.metrics:
            name = metric_description(metric)
            try:
                proposal = self._metric_proposal(
                    now, metric, spec_replicas, status_replicas, metrics, pods, tolerances
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
                f"invalid metrics ({invalid} invalid out of {len(self.spec.metrics)}), "
                f"first error is: {first_error.message}"
            )
        if invalid >= len(self.spec.metrics) or (invalid > 0 and replicas < spec_replicas):
            assert first_error is not None
            self._set(
                SCALING_ACTIVE,
                False,
                first_error.reason,
                f"the HPA was unable to compute the replica count: {first_error.message}",
            )
            return -1, "", tuple(statuses), error, True
        self._set(
            SCALING_ACTIVE,
            True,
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {metric_name}",
        )
        return replicas, metric_name, tuple(statuses), error, False

    def _metric_proposal(
        self,
        now: float,
        metric: MetricSpec,
        spec_replicas: int,
        status_replicas: int,
        metrics: MetricValues,
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> Proposal:
        calc = self._calculator
        source = metric.source
        if isinstance(source, PodsMetricSource):
            values = metrics.pods.get(source.metric.name)
            if not values:
                raise MetricUnavailable(
                    "",
                    f"unable to get metric {source.metric.name}: "
                    "no metrics returned from custom metrics API",
                )
            target = source.target.average_value_milli
            assert target is not None
            return calc.pods_metric_replicas(spec_replicas, target, values, pods, tolerances)
        if isinstance(source, ObjectMetricSource):
            if source.metric.name not in metrics.objects:
                raise MetricUnavailable(
                    "",
                    f"unable to get metric {source.metric.name}: "
                    f"{source.described_object.kind} {source.described_object.name}: "
                    "no metric value",
                )
            usage = metrics.objects[source.metric.name]
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
            items = metrics.external.get(source.metric.name)
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
        return self._resource_proposal(now, source, spec_replicas, metrics, pods, tolerances)

    def _resource_proposal(
        self,
        now: float,
        source: ResourceMetricSource,
        spec_replicas: int,
        metrics: MetricValues,
        pods: Sequence[PodState],
        tolerances: Tolerances,
    ) -> Proposal:
        key = f"{source.container}/{source.name}" if source.container else source.name
        raw = metrics.resources.get(key)
        if not raw:
            raise MetricUnavailable(
                "",
                f"unable to get metrics for resource {source.name}: "
                "no metrics returned from resource metrics API",
            )
        values = {n: v if isinstance(v, PodMetric) else PodMetric(v) for n, v in raw.items()}
        if source.target.type is MetricTargetType.AVERAGE_VALUE:
            assert source.target.average_value_milli is not None
            return self._calculator.raw_resource_replicas(
                spec_replicas,
                source.target.average_value_milli,
                source.name,
                values,
                pods,
                tolerances,
                now,
            )
        assert source.target.average_utilization is not None
        return self._calculator.resource_replicas(
            spec_replicas,
            source.target.average_utilization,
            source.name,
            values,
            pods,
            tolerances,
            now,
            source.container,
        )

    # -- legacy normalisation (behavior == nil) -------------------------------------------------

    def _normalize_legacy(
        self, now: float, current: int, prenormalized: int, min_replicas: int
    ) -> tuple[int, int]:
        cutoff = now - self.settings.downscale_stabilization
        stabilized = prenormalized
        old_index: int | None = None
        for i, rec in enumerate(self.recommendations):
            if rec.timestamp <= cutoff:
                old_index = i
            elif rec.replicas > stabilized:
                stabilized = rec.replicas
        self._record(old_index, Recommendation(prenormalized, now))
        if stabilized != prenormalized:
            self._set(
                ABLE_TO_SCALE,
                True,
                "ScaleDownStabilized",
                _HIGHER,
            )
        else:
            self._set(
                ABLE_TO_SCALE, True, "ReadyForNewScale", "recommended size matches current size"
            )
        scale_up_limit = int(max(2.0 * current, 4.0))
        if self.spec.max_replicas > scale_up_limit:
            maximum = scale_up_limit
            limit_reason, limit_message = (
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate",
            )
        else:
            maximum = self.spec.max_replicas
            limit_reason, limit_message = (
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            )
        if stabilized < min_replicas:
            desired = min_replicas
            limit_reason, limit_message = (
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            )
        elif stabilized > maximum:
            desired = maximum
        else:
            desired = stabilized
            limit_reason, limit_message = (
                "DesiredWithinRange",
                "the desired count is within the acceptable range",
            )
        self._set(SCALING_LIMITED, desired != stabilized, limit_reason, limit_message)
        return desired, stabilized

    def _record(self, old_index: int | None, rec: Recommendation) -> None:
        if old_index is not None:
            self.recommendations[old_index] = rec
        else:
            self.recommendations.append(rec)

    # -- behavior normalisation -----------------------------------------------------------------

    def _normalize_with_behavior(
        self, now: float, behavior: Behavior, current: int, prenormalized: int, min_replicas: int
    ) -> tuple[int, int]:
        up_rules = behavior.scale_up
        down_rules = behavior.scale_down
        assert up_rules is not None and down_rules is not None
        up_window = up_rules.stabilization_window_seconds or 0
        down_window = (
            down_rules.stabilization_window_seconds
            if down_rules.stabilization_window_seconds is not None
            else int(self.settings.downscale_stabilization)
        )
        stabilized = self._stabilize(now, current, prenormalized, up_window, down_window)
        if stabilized != prenormalized:
            if prenormalized >= current:
                self._set(
                    ABLE_TO_SCALE,
                    True,
                    "ScaleUpStabilized",
                    _LOWER,
                )
            else:
                self._set(
                    ABLE_TO_SCALE,
                    True,
                    "ScaleDownStabilized",
                    _HIGHER,
                )
        else:
            self._set(
                ABLE_TO_SCALE, True, "ReadyForNewScale", "recommended size matches current size"
            )
        desired, reason, message = self._rate_limit(
            now, up_rules, down_rules, current, stabilized, min_replicas
        )
        self._set(SCALING_LIMITED, desired != stabilized, reason, message)
        return desired, stabilized

    def _stabilize(
        self, now: float, current: int, desired: int, up_window: int, down_window: int
    ) -> int:
        up_cutoff = now - up_window
        down_cutoff = now - down_window
        up_rec = desired
        down_rec = desired
        old_index: int | None = None
        for i, rec in enumerate(self.recommendations):
            if rec.timestamp > up_cutoff:
                up_rec = min(rec.replicas, up_rec)
            if rec.timestamp > down_cutoff:
                down_rec = max(rec.replicas, down_rec)
            if rec.timestamp <= up_cutoff and rec.timestamp <= down_cutoff:
                old_index = i
        recommendation = current
        if recommendation < up_rec:
            recommendation = up_rec
        if recommendation > down_rec:
            recommendation = down_rec
        self._record(old_index, Recommendation(desired, now))
        return recommendation

    @staticmethod
    def _changed_within(now: float, period: int, events: Sequence[ScaleEvent]) -> int:
        cutoff = now - period
        return sum(e.replica_change for e in events if e.timestamp > cutoff)

    def _period_start(self, now: float, current: int, period: int) -> int:
        added = self._changed_within(now, period, self.scale_up_events)
        deleted = self._changed_within(now, period, self.scale_down_events)
        return current - added + deleted

    def _scale_up_limit(self, now: float, current: int, rules: ScalingRules) -> int:
        if rules.select_policy is SelectPolicy.DISABLED:
            return current
        use_min = rules.select_policy is SelectPolicy.MIN
        result = MAX_INT32 if use_min else MIN_INT32
        for policy in rules.policies or ():
            start = self._period_start(now, current, policy.period_seconds)
            if policy.type is PolicyType.PODS:
                proposed = start + policy.value
            else:
                proposed = _ceil(float(start) * (1 + float(policy.value) / 100))
            result = min(result, proposed) if use_min else max(result, proposed)
        return result

    def _scale_down_limit(self, now: float, current: int, rules: ScalingRules) -> int:
        if rules.select_policy is SelectPolicy.DISABLED:
            return current
        use_min = rules.select_policy is SelectPolicy.MIN
        result = MIN_INT32 if use_min else MAX_INT32
        for policy in rules.policies or ():
            start = self._period_start(now, current, policy.period_seconds)
            if policy.type is PolicyType.PODS:
                proposed = start - policy.value
            else:
                proposed = int(float(start) * (1 - float(policy.value) / 100))
            result = max(result, proposed) if use_min else min(result, proposed)
        return result

    def _rate_limit(
        self,
        now: float,
        up_rules: ScalingRules,
        down_rules: ScalingRules,
        current: int,
        desired: int,
        min_replicas: int,
    ) -> tuple[int, str, str]:
        if desired > current:
            limit = max(self._scale_up_limit(now, current, up_rules), current)
            if self.spec.max_replicas > limit:
                maximum, reason, message = (
                    limit,
                    "ScaleUpLimit",
                    "the desired replica count is increasing faster than the maximum scale rate",
                )
            else:
                maximum, reason, message = (
                    self.spec.max_replicas,
                    "TooManyReplicas",
                    "the desired replica count is more than the maximum replica count",
                )
            if desired > maximum:
                return maximum, reason, message
        elif desired < current:
            limit = min(self._scale_down_limit(now, current, down_rules), current)
            if min_replicas < limit:
                minimum, reason, message = (
                    limit,
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                )
            else:
                minimum, reason, message = (
                    min_replicas,
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count",
                )
            if desired < minimum:
                return minimum, reason, message
        return desired, "DesiredWithinRange", "the desired count is within the acceptable range"

    def _store_scale_event(self, now: float, previous: int, new: int) -> None:
        behavior = self.spec.behavior
        if behavior is None:
            return
        if new > previous:
            events, rules, change = self.scale_up_events, behavior.scale_up, new - previous
        else:
            events, rules, change = self.scale_down_events, behavior.scale_down, previous - new
        longest = max(
            (p.period_seconds for p in (rules.policies if rules else None) or ()), default=0
        )
        cutoff = now - longest
        old_index: int | None = None
        for i, event in enumerate(events):
            if event.timestamp <= cutoff:
                event.outdated = True
            if event.outdated:
                old_index = i
        new_event = ScaleEvent(change, now)
        if old_index is not None:
            events[old_index] = new_event
        else:
            events.append(new_event)


def _ceil(x: float) -> int:
    return math.ceil(x)


HpaModel = HorizontalController
"""The brief's other name for the same thing."""
