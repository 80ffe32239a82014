"""The controller's in-memory history of one HPA: recommendations and scale events.

Kept with the controller's own storage rules (one outdated slot reused per store), because
an outdated scale-up event can still count against a longer scale-down policy period until
its slot is reused. Times are seconds; an entry exactly a window or period old is outside it
(see the timing note in `controller`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from edl_sim.hpa.spec import ScalingRules


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


class ScalingHistory:
    """Recommendations and scale events of one HPA (lost on a controller restart)."""

    def __init__(self) -> None:
        self.recommendations: list[Recommendation] = []
        self.scale_up_events: list[ScaleEvent] = []
        self.scale_down_events: list[ScaleEvent] = []

    def reset(self) -> None:
        """Forget everything, as a kube-controller-manager restart does."""
        self.recommendations.clear()
        self.scale_up_events.clear()
        self.scale_down_events.clear()

    def record_initial(self, replicas: int, now: float) -> None:
        """First sight of the HPA: the current count becomes a recommendation."""
        if not self.recommendations:
            self.recommendations.append(Recommendation(replicas, now))

    def record(self, recommendation: Recommendation, is_old: Callable[[float], bool]) -> None:
        """Store a recommendation in the last old slot, or append it."""
        old_index: int | None = None
        for i, rec in enumerate(self.recommendations):
            if is_old(rec.timestamp):
                old_index = i
        if old_index is not None:
            self.recommendations[old_index] = recommendation
        else:
            self.recommendations.append(recommendation)

    def changed_within(self, now: float, period: int) -> tuple[int, int]:
        """Replicas added and removed by the events of the last `period` seconds."""
        cutoff = now - period
        added = sum(e.replica_change for e in self.scale_up_events if e.timestamp > cutoff)
        deleted = sum(e.replica_change for e in self.scale_down_events if e.timestamp > cutoff)
        return added, deleted

    def store_event(self, now: float, previous: int, new: int, rules: ScalingRules) -> None:
        """Store a rescale, reusing the last slot older than the longest policy period."""
        if new > previous:
            events, change = self.scale_up_events, new - previous
        else:
            events, change = self.scale_down_events, previous - new
        longest = max((p.period_seconds for p in rules.policies or ()), default=0)
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
