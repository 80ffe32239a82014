"""``optimus``: greedy allocation by marginal gain in remaining time, elastic.

Peng et al., "Optimus: An Efficient Dynamic Resource Scheduler for Deep Learning Clusters",
EuroSys'18, with an oracle for the job's speed and remaining work, as the Pollux artifact
(petuum/adaptdl, ``osdi21-artifact``) compares against it ("Optimus+Oracle", OSDI'21):

* **Elastic**: a job runs between its own min and max workers.
* **Its model is the truth.** Optimus fits each job's speed and remaining epochs online; here
  it knows them: the job's throughput at n workers is its curve's (as measured, on packed
  nodes; the world's placement effects are not in it) and its remaining samples are exact.
  A job's remaining time at n workers is ``remaining / X(n)``.
* **Every** ``baseline_interval`` (60 s, the artifact's scheduling period) the allocation
  is made from scratch over the cluster's allocatable (less what other pods hold): first
  every job gets its minimum, oldest first, while it fits; then one worker at a time goes to
  the job whose remaining time it shortens most per share of the cluster it takes
  (``(remaining / X(n) - remaining / X(n + 1)) / dominant share of one worker``), while
  that gain is positive, the job is below its max, and the worker fits.
* The targets are written to the Deployments directly (no HPA); the simulated scheduler
  places the pods (with the trainer's pod affinity). A new job waits for the next round.

Greedy by one worker, it stops in front of a size that is slower than the one before it
(bert from 4 workers to 5, across a node boundary), as its marginal rule says.
"""

from __future__ import annotations

import heapq

from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.policies.periodic import PeriodicPolicy
from edl_sim.cluster.policy import PolicySettings, SimulationView
from edl_sizing import Resources


class OptimusPolicy(PeriodicPolicy):
    """Marginal-gain greedy allocation with an oracle, every interval."""

    name = "optimus"

    def __init__(self, settings: PolicySettings) -> None:
        super().__init__(settings.baseline_interval)

    def submitted(self, job: JobRun) -> None:
        """Nothing until the next round (its Deployment starts at 0)."""

    def finished(self, job: JobRun) -> None:
        """Nothing to do (its room goes to the next round)."""

    def round(self, sim: SimulationView) -> None:
        """Scale every job to its greedy allocation, shrinking before growing."""
        targets = self.allocate(list(sim.active.values()))
        for job, target in sorted(targets.items(), key=lambda t: t[1] - t[0].replicas):
            if target != job.replicas:
                sim.scale(job, target)

    def allocate(self, jobs: list[JobRun]) -> dict[JobRun, int]:
        """Workers per job: minimums oldest first, then the greedy marginal gain."""
        sim = self.sim
        cluster = sim.cluster
        room = cluster.allocatable - sum(
            (p.requests for p in cluster.pods.values() if p.job is None), Resources()
        )
        total = cluster.allocatable
        alloc = {j: 0 for j in jobs}
        for job in sorted(jobs, key=lambda j: (j.spec.submit, j.key)):
            need = job.spec.worker.scaled(job.min_workers)
            if need.fits_in(room):
                room = room - need
                alloc[job] = job.min_workers
        remaining = {j: max(0.0, j.spec.work_samples - j.samples_at(sim.now)) for j in jobs}

        def gain(job: JobRun, n: int) -> float:
            here, there = job.curve.throughput(n), job.curve.throughput(n + 1)
            if there <= 0:
                return 0.0
            saved = (remaining[job] / here if here > 0 else float("inf")) - remaining[job] / there
            return saved / max(job.spec.worker.dominant_share(total), 1e-12)

        heap = [
            (-gain(j, n), j.spec.submit, j.key, j)
            for j, n in alloc.items()
            if n > 0 and n < j.max_workers
        ]
        heapq.heapify(heap)
        while heap:
            negative, _, _, job = heapq.heappop(heap)
            if -negative <= 0:
                break
            worker = job.spec.worker
            if not worker.fits_in(room):
                continue
            room = room - worker
            alloc[job] += 1
            n = alloc[job]
            if n < job.max_workers:
                heapq.heappush(heap, (-gain(job, n), job.spec.submit, job.key, job))
        return alloc
