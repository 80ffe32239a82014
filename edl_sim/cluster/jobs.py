"""One training job as our agent runs it: a world of Running workers, progress, pauses.

The world is the job's Running worker pods, clipped to its maximum; below its minimum the job
waits (trains nothing). A change of the world after the job first started is a **rescale**:
the job stands still for the pause the agent measures (up: a joiner, down: a leaver; changes
landing during a pause extend it). Throughput at a world of n is the job's curve at n, on
the world's placement (workers per node) when the curve has a placement table; a change of
placement at the same size is a rescale too (the world re-forms).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from edl_sim.cluster.inputs import Curve, JobSpec, Placement
from edl_sim.cluster.sim_cluster import SimPod

NAMESPACE = "default"


@dataclass(frozen=True)
class PauseModel:
    """Seconds a rescale stops training, drawn uniformly from each range."""

    up: tuple[float, float] = (0.6, 0.9)
    """A worker joins (in-process re-init, docs/elastic.md: 0.6-0.9 s)."""
    down: tuple[float, float] = (0.3, 0.3)
    """A worker leaves (in-process: 0.3 s)."""

    @classmethod
    def for_mode(cls, mode: str) -> PauseModel:
        """``in-process`` (default) or ``restart`` (the trainer process restarts: 2.2-3.3 s)."""
        if mode == "restart":
            return cls(up=(2.9, 3.3), down=(2.2, 3.3))
        return cls()

    def draw(self, rng: random.Random, growing: bool) -> float:
        """One pause."""
        low, high = self.up if growing else self.down
        return low if high <= low else rng.uniform(low, high)


class JobRun:
    """A job's state during one simulation."""

    def __init__(
        self,
        spec: JobSpec,
        curve: Curve,
        min_workers: int,
        max_workers: int,
        pauses: PauseModel,
        seed: int,
    ) -> None:
        self.spec = spec
        self.curve = curve
        self.key = f"{NAMESPACE}/{spec.name}"
        self.min_workers = min_workers
        self.max_workers = max_workers
        self._pauses = pauses
        self._rng = random.Random(f"{seed}/{spec.name}")
        self.replicas = 0
        """The Deployment's spec.replicas."""
        self.pods: dict[str, SimPod[JobRun]] = {}
        self.created = 0
        """Worker pods created so far (names them)."""
        self.running = 0
        self.world = 0
        self.placement: Placement = ()
        """Running workers per node, largest first."""
        self.training = False
        self.world_since = spec.submit
        self.samples = 0.0
        self._t = spec.submit
        self.pause_until = float("-inf")
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.rescales = 0
        self.lost_s = 0.0
        """Seconds training stood still in rescale pauses."""
        self.pause_sum = 0.0
        self.pause_count = 0
        """Like the agent's pause histogram (_sum, _count): what the sizer reads."""
        self.version = 0
        """Bumped whenever the predicted completion changes (stale events are ignored)."""
        self.dirty = False
        """Its Running pods changed since its world was last updated."""
        self.worlds: list[tuple[float, int]] = []
        """(time, world size) at each change of the world; 0: not training."""

    @property
    def rate(self) -> float:
        """Samples per second while training."""
        if not self.training:
            return 0.0
        return self.curve.throughput(self.world, self.placement)

    @property
    def remaining(self) -> float:
        """Samples still to train."""
        return max(0.0, self.spec.work_samples - self.samples)

    def advance(self, now: float) -> None:
        """Account the training done since the last call."""
        if now <= self._t:
            return
        if self.training:
            start = max(self._t, self.pause_until)
            if now > start:
                self.samples += self.rate * (now - start)
        self._t = now

    def samples_at(self, now: float) -> float:
        """Samples trained by ``now`` (at or after the last advance), without changing state."""
        if not self.training or now <= self._t:
            return self.samples
        start = max(self._t, self.pause_until)
        return self.samples + (self.rate * (now - start) if now > start else 0.0)

    def update_world(self, now: float) -> float | None:
        """Re-form the world from the Running pods; returns the pause of a rescale, if any."""
        self.dirty = False
        self.advance(now)
        world = min(self.running, self.max_workers)
        training = world >= self.min_workers
        placement = self.running_placement() if self.curve.placements is not None else ()
        if world == self.world and training == self.training and placement == self.placement:
            return None
        before, was_training = self.world, self.training
        self.world, self.training, self.placement = world, training, placement
        self.world_since = now
        self.worlds.append((now, world if training else 0))
        self.version += 1
        if self.started_at is None:
            if training:
                self.started_at = now
            return None
        self.rescales += 1
        if not training:
            return None
        pause = self._pauses.draw(self._rng, growing=world > before or not was_training)
        until = now + pause
        self.lost_s += max(0.0, until - max(now, self.pause_until))
        self.pause_until = max(self.pause_until, until)
        self.pause_sum += pause
        self.pause_count += 1
        return pause

    def running_placement(self) -> Placement:
        """Running workers per node, largest first."""
        nodes = Counter(p.node.name for p in self.pods.values() if p.running and p.node)
        return tuple(sorted(nodes.values(), reverse=True))

    def completion_time(self, now: float) -> float | None:
        """When the job finishes at its current rate (None: it is not training)."""
        rate = self.rate
        if rate <= 0:
            return None
        return max(now, self.pause_until) + self.remaining / rate

    def stable_for(self, now: float) -> float:
        """Seconds the world has trained unchanged and unpaused (0 when not training)."""
        if not self.training:
            return 0.0
        return max(0.0, now - max(self.world_since, self.pause_until))
