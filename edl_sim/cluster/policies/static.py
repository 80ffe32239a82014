"""``static``: every job runs at its requested size, admitted FIFO with backfill, never resized.

At each instant the queue is scanned in submission order and every job whose requested
workers all fit now is started as a gang (the head of the queue does not block smaller jobs
behind it: greedy backfill, as Kueue's BestEffortFIFO). The job's world is exactly its
requested size (min = max = requested), as a non-elastic job needs.
"""

from __future__ import annotations

from edl_sim.cluster.inputs import JobSpec
from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.policy import PolicySettings, SimulationView


class StaticPolicy:
    """FIFO with backfill at the requested size."""

    name = "static"

    def __init__(self, settings: PolicySettings) -> None:
        self._queue: list[JobRun] = []
        self._sim: SimulationView | None = None
        self._seen: tuple[int, int] | None = None
        """(room freed, queue length) at the last scan: nothing new fits without a change."""

    def bounds(self, spec: JobSpec) -> tuple[int, int]:
        """The requested size, fixed."""
        return spec.requested, spec.requested

    def start(self, sim: SimulationView) -> None:
        """Nothing runs on a timer."""
        self._sim = sim

    def submitted(self, job: JobRun) -> None:
        """Queue it; :meth:`settle` starts it when it fits."""
        self._queue.append(job)

    def finished(self, job: JobRun) -> None:
        """Nothing to do (its room is free)."""

    def settle(self) -> bool:
        """Start every queued job that fits now, in submission order."""
        assert self._sim is not None
        seen = (self._sim.cluster.freed, len(self._queue))
        if not self._queue or seen == self._seen:
            return False
        started = [j for j in self._queue if self._sim.admit(j, j.spec.requested)]
        if started:
            self._queue = [j for j in self._queue if j not in started]
        self._seen = (self._sim.cluster.freed, len(self._queue))
        return bool(started)
