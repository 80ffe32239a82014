"""What the baselines that act on a timer share: the loop that re-arms itself every interval.

``edl-2018``, ``tiresias`` and ``optimus`` decide only in their round (``settle`` never acts
for them, except where a subclass says otherwise); a round with no active job costs nothing
and is not counted as a decision.
"""

from __future__ import annotations

from edl_sim.cluster.inputs import JobSpec
from edl_sim.cluster.policy import SimulationView


class PeriodicPolicy:
    """A policy whose decisions are made by :meth:`round`, every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._sim: SimulationView | None = None

    @property
    def sim(self) -> SimulationView:
        """The simulation this policy was started in."""
        if self._sim is None:
            raise RuntimeError(f"{type(self).__name__} was not started")
        return self._sim

    def bounds(self, spec: JobSpec) -> tuple[int, int]:
        """The job's own min and max workers."""
        return spec.min_workers, spec.max_workers

    def start(self, sim: SimulationView) -> None:
        """Start the loop: its first round one interval in."""
        self._sim = sim
        sim.at(self._interval, self._tick)

    def settle(self) -> bool:
        """Acts only in its round."""
        return False

    def round(self, sim: SimulationView) -> None:
        """One round's decisions, while some job is active."""
        raise NotImplementedError

    def _tick(self) -> None:
        sim = self.sim
        if sim.active:
            sim.decided()
            self.round(sim)
        sim.at(sim.now + self._interval, self._tick)
