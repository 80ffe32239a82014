"""Search `behavior` parameters against an objective the admin states.

The search is a bounded, deterministic coordinate descent over a fixed grid: from each of a
few starting points (the HPA's own behavior, the defaults, a cautious and a brisk preset),
each parameter in turn is set to the grid value that scores best with the others held,
until a full round changes nothing or `max_rounds` is reached; the best end point wins.
Ties keep the current value, so the result does not depend on ordering or timing, and
each candidate is simulated once (results are cached). Per-direction tolerances are
searched too when the HPAConfigurableTolerance gate is on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from decimal import Decimal

from edl_sim.hpa.controller import ControllerSettings
from edl_sim.hpa.simulate import Simulation, SimulationResult, SimulationSettings, Summary
from edl_sim.hpa.spec import (
    Behavior,
    HorizontalPodAutoscalerSpec,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)
from edl_sim.hpa.trace import MetricTrace

MAX_ROUNDS = 3
"""Coordinate-descent rounds at most, unless told otherwise (``edl-hpa tune --max-rounds``)."""


@dataclass(frozen=True)
class BehaviorParams:
    """The searched shape of a behavior: one Pods and one Percent policy per direction."""

    up_window: int = 0
    up_pods: int = 4
    up_percent: int = 100
    up_period: int = 15
    up_select: SelectPolicy = SelectPolicy.MAX
    down_window: int = 300
    down_pods: int = 0
    """0 means no Pods policy for scale-down (the default has none)."""
    down_percent: int = 100
    down_period: int = 15
    down_select: SelectPolicy = SelectPolicy.MAX
    up_tolerance: Decimal | None = None
    """None: the controller's --horizontal-pod-autoscaler-tolerance."""
    down_tolerance: Decimal | None = None

    def behavior(self) -> Behavior:
        """The `spec.behavior` these parameters stand for."""
        down = [ScalingPolicy(PolicyType.PERCENT, self.down_percent, self.down_period)]
        if self.down_pods:
            down.insert(0, ScalingPolicy(PolicyType.PODS, self.down_pods, self.down_period))
        return Behavior(
            scale_up=ScalingRules(
                self.up_window,
                self.up_select,
                (
                    ScalingPolicy(PolicyType.PODS, self.up_pods, self.up_period),
                    ScalingPolicy(PolicyType.PERCENT, self.up_percent, self.up_period),
                ),
                self.up_tolerance,
            ),
            scale_down=ScalingRules(
                self.down_window, self.down_select, tuple(down), self.down_tolerance
            ),
        )


GRID: dict[str, tuple[object, ...]] = {
    "up_window": (0, 15, 30, 60, 120),
    "up_pods": (1, 2, 4, 8, 16),
    "up_percent": (25, 50, 100, 200),
    "up_period": (15, 30, 60, 120),
    "up_select": (SelectPolicy.MAX, SelectPolicy.MIN),
    "down_window": (0, 60, 120, 300, 600, 900),
    "down_pods": (0, 1, 2, 4),
    "down_percent": (10, 25, 50, 100),
    "down_period": (15, 60, 120, 300),
    "down_select": (SelectPolicy.MAX, SelectPolicy.MIN),
}
TOLERANCE_GRID: dict[str, tuple[object, ...]] = {
    "up_tolerance": (None, Decimal("0.05"), Decimal("0.2"), Decimal("0.3")),
    "down_tolerance": (None, Decimal("0.05"), Decimal("0.2"), Decimal("0.3")),
}


def params_from_behavior(behavior: Behavior | None, downscale_window: int) -> BehaviorParams:
    """Best fit of an existing behavior to the searched shape (defaults where it differs)."""
    params = BehaviorParams(down_window=downscale_window)
    if behavior is None:
        return params
    changes: dict[str, object] = {}
    for side, rules in (("up", behavior.scale_up), ("down", behavior.scale_down)):
        if rules is None:
            continue
        if rules.stabilization_window_seconds is not None:
            changes[f"{side}_window"] = rules.stabilization_window_seconds
        if rules.select_policy is not None and rules.select_policy is not SelectPolicy.DISABLED:
            changes[f"{side}_select"] = rules.select_policy
        changes[f"{side}_tolerance"] = rules.tolerance
        for p in rules.policies or ():
            kind = "pods" if p.type is PolicyType.PODS else "percent"
            changes[f"{side}_{kind}"] = p.value
            changes[f"{side}_period"] = p.period_seconds
    return replace(params, **changes)  # type: ignore[arg-type]


def _presets(downscale_window: int) -> tuple[BehaviorParams, ...]:
    """Further starting points, so one local optimum does not decide the answer."""
    return (
        BehaviorParams(down_window=downscale_window),
        BehaviorParams(up_window=60, down_window=600, down_percent=50, down_period=60),
        BehaviorParams(up_pods=8, up_percent=200, down_window=60, down_pods=2, down_period=60),
    )


Score = tuple[float, ...]


@dataclass(frozen=True)
class Objective:
    """What "better" means; lower scores win.

    With `reach_within` set: first the fewest spells under the target count longer than
    `reach_within` (every new target reached within it), then the fewest rescales, then the
    fewest under-provisioned replica-seconds. Otherwise a weighted cost:
    `under_weight * under + over_weight * over + pause_weight * paused replica-seconds`.
    """

    reach_within: float | None = None
    under_weight: float = 1.0
    over_weight: float = 0.0
    pause_weight: float = 1.0

    def score(self, summary: Summary) -> Score:
        """Lexicographic score of a run's summary."""
        if self.reach_within is not None:
            return (
                float(summary.late(self.reach_within)),
                float(summary.rescales),
                summary.under_replica_seconds,
                summary.over_replica_seconds,
            )
        cost = (
            self.under_weight * summary.under_replica_seconds
            + self.over_weight * summary.over_replica_seconds
            + self.pause_weight * summary.paused_replica_seconds
        )
        return (cost, float(summary.rescales))

    def describe(self) -> str:
        """One line for the report."""
        if self.reach_within is not None:
            return f"reach each new target within {self.reach_within:g}s, then fewest rescales"
        return (
            f"minimise {self.under_weight:g} x under-provisioned replica-seconds"
            f" + {self.over_weight:g} x over-provisioned replica-seconds"
            f" + {self.pause_weight:g} x replica-seconds paused by rescales"
        )


@dataclass(frozen=True)
class TuneResult:
    """The recommendation and the evidence for it."""

    current: SimulationResult
    current_score: Score
    best: BehaviorParams
    best_result: SimulationResult
    best_score: Score
    evaluated: int


class Tuner:
    """Coordinate descent over `GRID`, each candidate simulated on the same trace."""

    def __init__(
        self,
        spec: HorizontalPodAutoscalerSpec,
        trace: MetricTrace,
        simulation: SimulationSettings,
        controller: ControllerSettings,
        objective: Objective,
        grid: dict[str, tuple[object, ...]] | None = None,
        max_rounds: int = MAX_ROUNDS,
    ) -> None:
        self._spec = spec
        self._trace = trace
        self._simulation = simulation
        self._controller = controller
        self._objective = objective
        self._grid = grid or GRID
        self._max_rounds = max_rounds
        self._cache: dict[BehaviorParams, tuple[Score, SimulationResult]] = {}

    def _simulate(self, spec: HorizontalPodAutoscalerSpec) -> SimulationResult:
        return Simulation(spec, self._trace, self._simulation, self._controller).run()

    def evaluate(self, params: BehaviorParams) -> tuple[Score, SimulationResult]:
        """Simulate the HPA with these behavior parameters (cached)."""
        if params not in self._cache:
            result = self._simulate(replace(self._spec, behavior=params.behavior()))
            self._cache[params] = (self._objective.score(result.summary), result)
        return self._cache[params]

    def _descend(self, start: BehaviorParams) -> tuple[BehaviorParams, Score, SimulationResult]:
        """Coordinate descent from `start`: best grid value per parameter, until stable."""
        best = start
        best_score, best_result = self.evaluate(best)
        names: Sequence[str] = [f.name for f in fields(BehaviorParams)]
        for _ in range(self._max_rounds):
            changed = False
            for name in names:
                for value in self._grid.get(name, ()):
                    candidate = replace(best, **{name: value})  # type: ignore[arg-type]
                    score, result = self.evaluate(candidate)
                    if score < best_score:
                        best, best_score, best_result, changed = candidate, score, result, True
            if not changed:
                break
        return best, best_score, best_result

    def run(self, progress: Callable[[str], None] | None = None) -> TuneResult:
        """Search and return the best parameters with the current HPA's figures beside them."""
        current = self._simulate(self._spec)
        window = int(self._controller.downscale_stabilization)
        starts: list[BehaviorParams] = []
        for start in (params_from_behavior(self._spec.behavior, window), *_presets(window)):
            if start not in starts:
                starts.append(start)
        best = starts[0]
        best_score, best_result = self.evaluate(best)
        for index, start in enumerate(starts):
            candidate, score, result = self._descend(start)
            if progress is not None:
                progress(
                    f"start {index + 1}/{len(starts)}: {len(self._cache)} candidates simulated"
                )
            if score < best_score:
                best, best_score, best_result = candidate, score, result
        return TuneResult(
            current=current,
            current_score=self._objective.score(current.summary),
            best=best,
            best_result=best_result,
            best_score=best_score,
            evaluated=len(self._cache),
        )
