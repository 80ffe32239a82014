"""`HorizontalController`: one HPA's reconcile loop, steppable one sync at a time.

This is the part of kube-controller-manager's `horizontal.go` (v1.34) that decides a replica
count: the min/max branches, the metrics' verdict (`proposals`), the legacy or `behavior`
normalisation (`normalize`) over the HPA's history (`history`), and the conditions the real
controller writes. Reading the scale, listing pods and fetching metrics are the caller's
job: `step()` takes them as arguments, so a test can feed the same values to the model and
to a real controller and compare decisions.

Timing note: recommendations and scale events are compared with their windows strictly
(an entry exactly `window` seconds old is out). The real controller's syncs are a few
milliseconds longer than the sync period, so on an ideal 15 s grid this is what it does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from edl_sim.hpa.normalize import Bounds, normalize_legacy, normalize_with_behavior
from edl_sim.hpa.proposals import MetricsEvaluator, metric_description
from edl_sim.hpa.replicas import PodState, ReplicaCalculator, Tolerances
from edl_sim.hpa.spec import HorizontalPodAutoscalerSpec
from edl_sim.hpa.stabilization import Recommendation, ScaleEvent, ScalingHistory
from edl_sim.hpa.sync import (
    ABLE_TO_SCALE,
    SCALING_ACTIVE,
    SCALING_LIMITED,
    Condition,
    ControllerSettings,
    Decision,
    MetricStatus,
    MetricValues,
)

__all__ = [
    "ABLE_TO_SCALE",
    "SCALING_ACTIVE",
    "SCALING_LIMITED",
    "Condition",
    "ControllerSettings",
    "Decision",
    "HorizontalController",
    "HpaModel",
    "MetricStatus",
    "MetricValues",
    "Recommendation",
    "ScaleEvent",
    "default_pods",
    "metric_description",
]


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
        self._metrics = MetricsEvaluator(
            calculator
            or ReplicaCalculator(
                self.settings.cpu_initialization_period, self.settings.initial_readiness_delay
            )
        )
        self.history = ScalingHistory()
        self._conditions: dict[str, Condition] = {}
        self.last_scale_time: float | None = None

    @property
    def recommendations(self) -> list[Recommendation]:
        """Unstabilised recommendations kept for the stabilisation windows."""
        return self.history.recommendations

    @property
    def scale_up_events(self) -> list[ScaleEvent]:
        """Scale-up events kept for the scale-up policies' periods."""
        return self.history.scale_up_events

    @property
    def scale_down_events(self) -> list[ScaleEvent]:
        """Scale-down events kept for the scale-down policies' periods."""
        return self.history.scale_down_events

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
        self.history.reset()
        self._conditions.clear()

    def tolerances(self) -> Tolerances:
        """The flag's tolerance, or the behavior's per direction when the gate is on."""
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

    def step(
        self,
        now: float,
        current_replicas: int,
        metrics: MetricValues,
        pods: Sequence[PodState] | None = None,
        status_replicas: int | None = None,
        scaled_at: float | None = None,
    ) -> Decision:
        """Reconcile once at `now` (seconds) and return the decision.

        `current_replicas` is the scale's spec.replicas, `status_replicas` its
        status.replicas (defaults to the same), `pods` what the selector lists (defaults to
        `default_pods(current_replicas)`). `scaled_at` is when a rescale took effect (defaults
        to `now`): the real controller stamps its scale event after the scale update returns,
        milliseconds after the sync began, and with periods equal to the sync period those
        milliseconds decide whether an event is still inside a policy period.
        """
        pod_list = tuple(pods) if pods is not None else default_pods(current_replicas)
        status = current_replicas if status_replicas is None else status_replicas
        self._set(
            Condition(
                ABLE_TO_SCALE,
                True,
                "SucceededGetScale",
                "the HPA controller was able to get the target's current scale",
            )
        )
        self.history.record_initial(current_replicas, now)
        spec = self.spec
        min_replicas = spec.min_replicas if spec.min_replicas is not None else 1
        decision = _Draft(now, current_replicas)
        if current_replicas == 0 and min_replicas != 0:
            decision.rescale = False
            self._set(
                Condition(
                    SCALING_ACTIVE,
                    False,
                    "ScalingDisabled",
                    "scaling is disabled since the replica count of the target is zero",
                )
            )
        elif current_replicas > spec.max_replicas:
            decision.reason = "Current number of replicas above Spec.MaxReplicas"
            decision.desired = spec.max_replicas
        elif current_replicas < min_replicas:
            decision.reason = "Current number of replicas below Spec.MinReplicas"
            decision.desired = min_replicas
        else:
            outcome = self._metrics.evaluate(
                spec.metrics, now, current_replicas, status, metrics, pod_list, self.tolerances()
            )
            self._set(outcome.scaling_active)
            decision.statuses, decision.error = outcome.statuses, outcome.error
            if outcome.frozen:
                decision.rescale = False
                return self._finish(decision)
            decision.metric = outcome.metric
            decision.metric_replicas = outcome.replicas
            desired = max(0, outcome.replicas)
            if desired > current_replicas:
                decision.reason = f"{outcome.metric} above target"
            elif desired < current_replicas:
                decision.reason = "All metrics below target"
            bounds = Bounds(current_replicas, min_replicas, spec.max_replicas)
            if spec.behavior is None:
                normalized = normalize_legacy(
                    self.history, now, self.settings.downscale_stabilization, bounds, desired
                )
            else:
                normalized = normalize_with_behavior(
                    self.history,
                    now,
                    spec.behavior,
                    self.settings.downscale_stabilization,
                    bounds,
                    desired,
                )
            self._set(normalized.able_to_scale)
            self._set(normalized.scaling_limited)
            decision.desired = normalized.desired
            decision.stabilized = normalized.stabilized
            decision.rescale = normalized.desired != current_replicas
        if decision.rescale:
            self._set(
                Condition(
                    ABLE_TO_SCALE,
                    True,
                    "SucceededRescale",
                    f"the HPA controller was able to update the target scale to {decision.desired}",
                )
            )
            if spec.behavior is not None:
                rules = (
                    spec.behavior.scale_up
                    if decision.desired > current_replicas
                    else spec.behavior.scale_down
                )
                assert rules is not None
                self.history.store_event(
                    now if scaled_at is None else scaled_at,
                    current_replicas,
                    decision.desired,
                    rules,
                )
            self.last_scale_time = now if scaled_at is None else scaled_at
        return self._finish(decision)

    def _set(self, condition: Condition) -> None:
        self._conditions[condition.type] = condition

    def _finish(self, draft: _Draft) -> Decision:
        return Decision(
            time=draft.now,
            current_replicas=draft.current,
            desired_replicas=draft.desired if draft.rescale else draft.current,
            rescaled=draft.rescale,
            reason=draft.reason,
            metric=draft.metric,
            metric_replicas=draft.metric_replicas,
            stabilized_replicas=draft.stabilized,
            metric_statuses=draft.statuses,
            conditions=tuple(self._conditions.values()),
            error=draft.error,
        )


class _Draft:
    """The decision while a sync is being worked out."""

    def __init__(self, now: float, current: int) -> None:
        self.now = now
        self.current = current
        self.desired = 0
        self.rescale = True
        self.reason = ""
        self.metric = ""
        self.metric_replicas: int | None = None
        self.stabilized: int | None = None
        self.statuses: tuple[MetricStatus, ...] = ()
        self.error: str | None = None


HpaModel = HorizontalController
"""The brief's other name for the same thing."""
