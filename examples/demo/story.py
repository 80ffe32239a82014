"""The scripted story: what happens to the rest of the cluster, and when.

Every act waits for a condition on what the job has *done* (its world, steps trained in it),
never for a time, so the story is the same on a fast and on a loaded machine:

1. a batch job holds 2 of the 3 slots; digits starts on the one left (world 1);
2. the batch job finishes: 2 slots free, the sizer grows digits to 3;
3. a higher-priority service arrives (2 pods, priority 1000) and waits for room; the sizer
   shrinks digits to 1 and the service's pods are scheduled into the freed slots;
4. the service leaves; digits grows back to 3 and trains to the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from examples.demo.telemetry import Training

BATCH = "batch"
SERVICE = "serving"
SERVICE_PRIORITY = 1000


class Stage(Protocol):
    """Where the story happens: the simulated node, or a real cluster."""

    slots: int
    """CPUs of the node."""

    def add_workload(self, name: str, count: int, cpu: int, priority: int) -> None:
        """Other work arrives: ``count`` pods of ``cpu`` CPUs at ``priority``."""
        ...

    def remove_workload(self, name: str) -> None:
        """The work leaves."""
        ...

    def workload_bound(self, name: str) -> bool:
        """Every pod of the work has been scheduled."""
        ...


@dataclass(frozen=True)
class Act:
    """A change to the cluster, made once ``ready`` holds."""

    headline: str
    ready: Callable[[Training, Stage], bool]
    change: Callable[[Stage], None]


def _trained(size: int, steps: int) -> Callable[[Training, Stage], bool]:
    def ready(t: Training, cluster: Stage) -> bool:
        return t.world.members == size and t.steps_in_world >= steps

    return ready


def _service_in(steps: int) -> Callable[[Training, Stage], bool]:
    trained = _trained(1, steps)

    def ready(t: Training, cluster: Stage) -> bool:
        return cluster.workload_bound(SERVICE) and trained(t, cluster)

    return ready


def opening(cluster: Stage) -> str:
    """Sets the scene before the job starts; returns its headline."""
    cluster.add_workload(BATCH, cluster.slots - 1, 1, 0)
    return f"a batch job holds {cluster.slots - 1} of the {cluster.slots} CPU slots"


def acts(dwell_steps: int) -> list[Act]:
    """The story's acts; each waits for ``dwell_steps`` steps in the world before it."""
    return [
        Act(
            "the batch job finishes: its slots are free",
            _trained(1, dwell_steps),
            lambda c: c.remove_workload(BATCH),
        ),
        Act(
            f"a higher-priority service arrives (2 pods, priority {SERVICE_PRIORITY})",
            _trained(3, dwell_steps),
            lambda c: c.add_workload(SERVICE, 2, 1, SERVICE_PRIORITY),
        ),
        Act(
            "the service leaves",
            _service_in(dwell_steps),
            lambda c: c.remove_workload(SERVICE),
        ),
    ]


class Story:
    """Plays the acts in order."""

    def __init__(self, cluster: Stage, dwell_steps: int) -> None:
        self.headline = opening(cluster)
        self._acts = acts(dwell_steps)
        self.played = 0

    @property
    def total(self) -> int:
        """Number of acts."""
        return len(self._acts)

    @property
    def done(self) -> bool:
        """Every act has been played."""
        return self.played == len(self._acts)

    def advance(self, t: Training, cluster: Stage) -> Act | None:
        """Plays the next act if it is ready; returns it."""
        if self.done:
            return None
        act = self._acts[self.played]
        if not act.ready(t, cluster):
            return None
        act.change(cluster)
        self.played += 1
        self.headline = act.headline
        return act
