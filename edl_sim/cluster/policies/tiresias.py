"""``tiresias``: discretised two-dimensional least-attained-service, without elasticity.

Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI'19, as its
2D-LAS variant runs in the Pollux artifact (petuum/adaptdl, ``osdi21-artifact``,
``simulator/tiresias.py``), the baseline that Pollux (OSDI'21) compares against:

* **Non-elastic.** A job runs at exactly its requested workers (min = max = requested) or not
  at all: it is admitted as a gang, and preempted as a whole (its Deployment scaled to 0).
* **Attained service** (the two dimensions: workers x time): the worker-seconds a job has run
  so far (a worker being one GPU on the dev set's nodes).
* **Two queues**, the threshold between them :data:`QUEUE_THRESHOLD_WORKER_S` (16 GPU-hours,
  the artifact's): a new job enters the first queue; a job whose attained service reaches the
  threshold moves to the second. Within a queue, jobs keep the order in which they entered
  it (first come, first served).
* **Every** ``baseline_interval`` (60 s, the artifact's scheduling period) and whenever a job
  arrives or finishes, the queues are walked in order (first queue first) and each job's
  requests are added up while they fit the cluster's allocatable (less what other pods hold):
  those jobs should run. A running job that should not is preempted; a job that should run
  and does not is admitted (when its gang does not fit the nodes' free room, fragmentation,
  it waits and the walk goes on).
* **Starvation**: the paper promotes a job back to the first queue after it has waited
  STARVELIMIT times its last run; the artifact runs with it off, and so does this policy.

A preemption here costs the job what a rescale costs in the simulator (its world's start-up
pause when it resumes), not a checkpoint and restart: a lower bound on what it costs Tiresias.
"""

from __future__ import annotations

from edl_sim.cluster.inputs import JobSpec
from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.policies.periodic import PeriodicPolicy
from edl_sim.cluster.policy import PolicySettings, SimulationView
from edl_sizing import Resources

QUEUE_THRESHOLD_WORKER_S = 16 * 3600.0
"""Attained service (worker-seconds) at which a job leaves the first queue."""


class TiresiasPolicy(PeriodicPolicy):
    """2D-LAS with two queues, non-elastic, preemptive."""

    name = "tiresias"

    def __init__(self, settings: PolicySettings) -> None:
        super().__init__(settings.baseline_interval)
        self._queues: tuple[list[JobRun], list[JobRun]] = ([], [])
        self._attained: dict[str, float] = {}
        self._last = 0.0
        self._changed = False

    def bounds(self, spec: JobSpec) -> tuple[int, int]:
        """The requested size, fixed."""
        return spec.requested, spec.requested

    def submitted(self, job: JobRun) -> None:
        """A new job enters the first queue; the queues are walked at once."""
        self._account()
        self._queues[0].append(job)
        self._attained[job.key] = 0.0
        self._changed = True

    def finished(self, job: JobRun) -> None:
        """It leaves its queue; its room may admit others."""
        self._account()
        for queue in self._queues:
            if job in queue:
                queue.remove(job)
        self._attained.pop(job.key, None)
        self._changed = True

    def settle(self) -> bool:
        """Walk the queues after an arrival or a completion."""
        if not self._changed:
            return False
        self._changed = False
        return self._schedule()

    def round(self, sim: SimulationView) -> None:
        """Account the service run, demote, and walk the queues."""
        self._account()
        self._demote()
        self._schedule()

    def _account(self) -> None:
        """Add the worker-seconds run since the last look to each job's attained service."""
        sim = self.sim
        elapsed = sim.now - self._last
        self._last = sim.now
        if elapsed <= 0:
            return
        for queue in self._queues:
            for job in queue:
                if job.training:
                    self._attained[job.key] += job.world * elapsed

    def _demote(self) -> None:
        first, second = self._queues
        moved = [j for j in first if self._attained[j.key] >= QUEUE_THRESHOLD_WORKER_S]
        for job in moved:
            first.remove(job)
            second.append(job)

    def _schedule(self) -> bool:
        """Preempt what should not run, admit what should; True if anything changed."""
        sim = self.sim
        room = sim.cluster.allocatable - sum(
            (p.requests for p in sim.cluster.pods.values() if p.job is None), Resources()
        )
        chosen: list[JobRun] = []
        for job in (*self._queues[0], *self._queues[1]):
            need = job.spec.worker.scaled(job.spec.requested)
            if need.fits_in(room):
                room = room - need
                chosen.append(job)
        keep = set(chosen)
        changed = False
        for queue in self._queues:
            for job in queue:
                if job not in keep and job.replicas > 0:
                    sim.scale(job, 0)
                    changed = True
        for job in chosen:
            if job.replicas == 0 and sim.admit(job, job.spec.requested):
                changed = True
        return changed
