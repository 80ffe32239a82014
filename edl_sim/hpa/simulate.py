"""Replay a metric trace through the HPA model, with pods that come and go.

Load model (how recorded values become the values the HPA would see after it changed the
replica count -- a replay cannot know this, so it is an explicit choice):

* `split` (default): the trace is demand. For a per-pod metric, the job-level total at time t
  (the sum over the recorded pods, or the object value if the metric was recorded per object)
  is divided evenly over the simulated pods that are Running. Twice the pods, half the value
  each: the right model for load-type metrics (work queued, GPU utilisation under a fixed
  global batch). Object/External values are replayed as recorded.
* `replay`: per-pod values are replayed as recorded. Simulated pod i takes the i-th recorded
  pod's series (by name); pods beyond the recorded ones report the recorded mean. Right for
  metrics that do not depend on the replica count (per-pod throughput).

New pods are Pending for `pod_startup` seconds (the HPA treats them as unready); scale-down
removes the newest pods at once. `rescale_cost` is the training time every change costs
(the world re-forms): it is counted in the summary, it does not alter the metric.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from edl_common.quantity import milli_value
from edl_sim.hpa.controller import (
    ControllerSettings,
    Decision,
    HorizontalController,
    MetricValues,
)
from edl_sim.hpa.errors import HpaError
from edl_sim.hpa.replicas import PodMetric, PodPhase, PodState
from edl_sim.hpa.spec import (
    ExternalMetricSource,
    HorizontalPodAutoscalerSpec,
    MetricSpec,
    MetricTargetType,
    ObjectMetricSource,
    PodsMetricSource,
    ResourceMetricSource,
)
from edl_sim.hpa.trace import MetricTrace


class LoadModel(StrEnum):
    """How per-pod trace values follow the simulated replica count (see module docstring)."""

    SPLIT = "split"
    REPLAY = "replay"


@dataclass(frozen=True)
class SimulationSettings:
    """Knobs of one simulated run."""

    initial_replicas: int
    """spec.replicas of the target when the HPA is created (t = 0)."""
    load_model: LoadModel = LoadModel.SPLIT
    pod_startup: float = 0.0
    """Seconds a new pod stays Pending before it is Running and Ready."""
    rescale_cost: float = 0.0
    """Training seconds lost by the whole job at each replica change."""
    duration: float | None = None
    """Seconds to simulate after HPA creation (default: to the trace's last sample)."""
    requests: Mapping[str, Decimal] = field(default_factory=dict)
    """Per-pod request of each resource (for Utilization targets), in the resource's unit."""


@dataclass(frozen=True)
class Step:
    """One row of the timeline: a sync and what the simulated cluster looked like."""

    decision: Decision
    target_replicas: int
    metric_values: tuple[float | None, ...]
    """Each metric's current value as HPA status shows it (units, not milli)."""
    ready_pods: int


@dataclass(frozen=True)
class Reach:
    """How long the replica count took to reach a new target count."""

    since: float
    target: int
    after: float | None
    """Seconds until the count reached (or passed) the target; None if it did not in time."""
    lasted: float
    """Seconds that target stayed the target."""


@dataclass(frozen=True)
class Summary:
    """Figures of a run, the basis of `tune`'s objectives."""

    rescales: int
    scale_ups: int
    scale_downs: int
    reaches: tuple[Reach, ...]
    under_replica_seconds: float
    over_replica_seconds: float
    paused_seconds: float
    paused_replica_seconds: float
    under_stretches: tuple[float, ...] = ()
    """Lengths of the spells spent below the target count (under-provisioned)."""
    over_stretches: tuple[float, ...] = ()
    """Lengths of the spells spent above the target count (over-provisioned)."""

    def late(self, within: float) -> int:
        """Spells under the target count that lasted longer than `within` seconds."""
        return sum(1 for length in self.under_stretches if length > within)

    @property
    def longest_under(self) -> float:
        """Longest spell below the target count, seconds."""
        return max(self.under_stretches, default=0.0)

    @property
    def longest_over(self) -> float:
        """Longest spell above the target count, seconds."""
        return max(self.over_stretches, default=0.0)

    @property
    def max_reach(self) -> float | None:
        """Longest time to reach a target that was reached."""
        times = [r.after for r in self.reaches if r.after is not None]
        return max(times) if times else None

    @property
    def unreached(self) -> int:
        """Targets never reached while they were the target."""
        return sum(1 for r in self.reaches if r.after is None)


@dataclass(frozen=True)
class SimulationResult:
    """Timeline and summary of one run."""

    steps: tuple[Step, ...]
    summary: Summary
    metric_names: tuple[str, ...]
    metric_targets: tuple[float | None, ...]


class SimulationError(HpaError):
    """The trace cannot drive this HPA (e.g. a metric the HPA names is not in it)."""


def _units(milli: int | None) -> float | None:
    return None if milli is None else milli / 1000


def metric_target(metric: MetricSpec) -> float | None:
    """The target in the metric's own units (a percentage for Utilization)."""
    target = metric.source.target
    if target.type is MetricTargetType.UTILIZATION:
        return float(target.average_utilization or 0)
    milli = (
        target.value_milli if target.type is MetricTargetType.VALUE else target.average_value_milli
    )
    return _units(milli)


class Simulation:
    """Drives a `HorizontalController` over a trace, one sync at a time."""

    def __init__(
        self,
        spec: HorizontalPodAutoscalerSpec,
        trace: MetricTrace,
        settings: SimulationSettings,
        controller_settings: ControllerSettings | None = None,
    ) -> None:
        self._controller_settings = controller_settings or ControllerSettings()
        self._spec = spec
        self._trace = trace
        self._settings = settings
        self._model = HorizontalController(spec, self._controller_settings)
        missing = [
            m.metric_name for m in self._model.spec.metrics if m.metric_name not in trace.metrics
        ]
        if missing:
            raise SimulationError(f"the trace has no samples for metric(s): {', '.join(missing)}")
        if settings.initial_replicas < 0:
            raise SimulationError("initial replicas must be >= 0")
        self._pod_requests = self._requests_per_pod()

    def _requests_per_pod(self) -> dict[str, int]:
        """Each resource metric's request in milli-units (1 unit unless given)."""
        requests: dict[str, int] = {}
        for metric in self._model.spec.metrics:
            source = metric.source
            if isinstance(source, ResourceMetricSource):
                quantity = self._settings.requests.get(source.name, Decimal(1))
                requests[source.name] = milli_value(quantity)
                if source.container:
                    requests[f"{source.container}/{source.name}"] = milli_value(quantity)
        return requests

    def run(self) -> SimulationResult:
        """Simulate from HPA creation (t = 0) to the end and summarise."""
        settings = self._settings
        end = settings.duration if settings.duration is not None else self._trace.end
        pods: list[tuple[str, float]] = []  # (name, created)
        serial = 0
        for _ in range(settings.initial_replicas):
            pods.append((f"trainer-{serial}", -math.inf))
            serial += 1
        current = settings.initial_replicas
        steps: list[Step] = []
        for now in self._model.sync_times(end):
            states = tuple(self._pod_state(name, created, now) for name, created in pods)
            values = self._metric_values(now, states)
            decision = self._model.step(now, current, values, states, status_replicas=len(pods))
            steps.append(
                Step(
                    decision,
                    self.target_replicas(now, len(running_names(states))),
                    self._status_values(decision),
                    sum(1 for s in states if s.phase is PodPhase.RUNNING),
                )
            )
            if decision.rescaled:
                current = decision.desired_replicas
                while len(pods) > current:
                    pods.pop()
                while len(pods) < current:
                    pods.append((f"trainer-{serial}", now))
                    serial += 1
        metrics = self._model.spec.metrics
        return SimulationResult(
            tuple(steps),
            summarize(steps, self._controller_settings.sync_period, settings.rescale_cost),
            tuple(m.metric_name for m in metrics),
            tuple(metric_target(m) for m in metrics),
        )

    # -- the simulated cluster -------------------------------------------------------------

    def _pod_state(self, name: str, created: float, now: float) -> PodState:
        requests = self._pod_requests
        if now - created < self._settings.pod_startup:
            return PodState(name, PodPhase.PENDING, ready=False, start_time=None, requests=requests)
        started = created + self._settings.pod_startup if math.isfinite(created) else -1e9
        return PodState(name, start_time=started, ready_transition_time=started, requests=requests)

    def _per_pod(self, metric: str, now: float, running: list[str]) -> dict[str, int]:
        if not running:
            return {}
        if self._settings.load_model is LoadModel.SPLIT or not self._trace.has_pod_series(metric):
            total = self._trace.total(metric, now)
            if total is None:
                return {}
            share = total / len(running)
            return {name: milli_value(share) for name in running}
        recorded = list(self._trace.pod_values(metric, now).values())
        if not recorded:
            return {}
        mean = Decimal(sum(recorded)) / len(recorded)
        return {
            name: milli_value(recorded[i] if i < len(recorded) else mean)
            for i, name in enumerate(running)
        }

    def _metric_values(self, now: float, states: tuple[PodState, ...]) -> MetricValues:
        running = running_names(states)
        pods: dict[str, dict[str, int]] = {}
        objects: dict[str, int] = {}
        external: dict[str, list[int]] = {}
        resources: dict[str, dict[str, int | PodMetric]] = {}
        for metric in self._model.spec.metrics:
            source = metric.source
            name = metric.metric_name
            if isinstance(source, PodsMetricSource):
                pods[name] = self._per_pod(name, now, running)
            elif isinstance(source, ResourceMetricSource):
                key = f"{source.container}/{name}" if source.container else name
                resources[key] = {
                    pod: PodMetric(v, timestamp=now)
                    for pod, v in self._per_pod(name, now, running).items()
                }
            elif isinstance(source, ObjectMetricSource):
                total = self._trace.total(name, now)
                if total is not None:
                    objects[name] = milli_value(total)
            elif isinstance(source, ExternalMetricSource):
                items = self._trace.object_values(name, now) or list(
                    self._trace.pod_values(name, now).values()
                )
                if items:
                    external[name] = [milli_value(v) for v in items]
        return MetricValues(pods=pods, objects=objects, external=external, resources=resources)

    def _status_values(self, decision: Decision) -> tuple[float | None, ...]:
        out: list[float | None] = []
        for status in decision.metric_statuses:
            if status.utilization is not None:
                out.append(float(status.utilization))
            else:
                out.append(_units(status.current))
        if not decision.metric_statuses:
            out = [None] * len(self._model.spec.metrics)
        return tuple(out)

    # -- the yardstick -------------------------------------------------------------------------

    def target_replicas(self, now: float, running: int) -> int:
        """The count the load asks for at `now`, with no tolerance, windows or rate limits.

        Per metric: ceil(total / per-pod target) for averaged targets (Pods, Resource,
        AverageValue), ceil(value / target) for Object/External AverageValue; Value targets
        use ceil(value / target * running pods), as the replay cannot know how the value
        would react. The max over metrics, clamped to min/max.
        """
        spec = self._model.spec
        best = 0
        for metric in spec.metrics:
            best = max(best, self._metric_target_replicas(metric, now, running))
        low = spec.min_replicas if spec.min_replicas is not None else 1
        return min(max(best, low), spec.max_replicas)

    def _metric_target_replicas(self, metric: MetricSpec, now: float, running: int) -> int:
        total = self._trace.total(metric.metric_name, now)
        if total is None:
            return 0
        target = metric.source.target
        if target.type is MetricTargetType.UTILIZATION:
            assert isinstance(metric.source, ResourceMetricSource)
            request = self._settings.requests.get(metric.source.name, Decimal(1))
            per_pod = request * Decimal(target.average_utilization or 1) / 100
            return math.ceil(total / per_pod)
        if target.type is MetricTargetType.AVERAGE_VALUE:
            assert target.average_value_milli is not None
            return math.ceil(total * 1000 / target.average_value_milli)
        assert target.value_milli is not None
        ratio = total * 1000 / target.value_milli
        return math.ceil(ratio * running)


def running_names(states: tuple[PodState, ...]) -> list[str]:
    """Pods that are Running (they report metrics; Pending ones do not)."""
    return [s.name for s in states if s.phase is PodPhase.RUNNING]


def summarize(steps: list[Step], sync_period: float, rescale_cost: float) -> Summary:
    """Scale events, reach times and replica-seconds over/under the target count."""
    ups = sum(
        1
        for s in steps
        if s.decision.rescaled and s.decision.desired_replicas > s.decision.current_replicas
    )
    downs = sum(
        1
        for s in steps
        if s.decision.rescaled and s.decision.desired_replicas < s.decision.current_replicas
    )
    under = 0.0
    over = 0.0
    paused_replica_seconds = 0.0
    for s in steps:
        replicas = s.decision.desired_replicas
        under += max(0, s.target_replicas - replicas) * sync_period
        over += max(0, replicas - s.target_replicas) * sync_period
        if s.decision.rescaled:
            paused_replica_seconds += replicas * rescale_cost
    return Summary(
        rescales=ups + downs,
        scale_ups=ups,
        scale_downs=downs,
        reaches=_reaches(steps, sync_period),
        under_stretches=_stretches(steps, sync_period, under=True),
        over_stretches=_stretches(steps, sync_period, under=False),
        under_replica_seconds=under,
        over_replica_seconds=over,
        paused_seconds=(ups + downs) * rescale_cost,
        paused_replica_seconds=paused_replica_seconds,
    )


def _reaches(steps: list[Step], sync_period: float) -> tuple[Reach, ...]:
    """For each change of the target count that needs a rescale: when was it reached or passed."""
    reaches: list[Reach] = []
    i = 0
    while i < len(steps):
        target = steps[i].target_replicas
        j = i
        while j < len(steps) and steps[j].target_replicas == target:
            j += 1
        before = steps[i].decision.current_replicas
        if target != before:
            up = target > before
            since = steps[i].decision.time
            reached_at = next(
                (
                    steps[k].decision.time
                    for k in range(i, j)
                    if (steps[k].decision.desired_replicas >= target) == up
                    or steps[k].decision.desired_replicas == target
                ),
                None,
            )
            lasted = steps[j - 1].decision.time - since + sync_period
            reaches.append(
                Reach(since, target, None if reached_at is None else reached_at - since, lasted)
            )
        i = j
    return tuple(reaches)


def _stretches(steps: list[Step], sync_period: float, under: bool) -> tuple[float, ...]:
    """Lengths of the runs of syncs spent below (or above) the target count."""
    runs: list[float] = []
    length = 0.0
    for s in steps:
        replicas = s.decision.desired_replicas
        off = replicas < s.target_replicas if under else replicas > s.target_replicas
        if off:
            length += sync_period
        elif length:
            runs.append(length)
            length = 0.0
    if length:
        runs.append(length)
    return tuple(runs)
