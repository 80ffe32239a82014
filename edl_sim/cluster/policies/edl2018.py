"""``edl-2018``: the original EDL autoscaler's fulfillment rule (PaddlePaddle/edl v0.1.0).

Every ``edl2018_interval`` (5 s) the autoscaler looks at the cluster and resizes trainers
(it writes the trainer Job's parallelism; no HPA):

* **Cluster view**: totals are the nodes' allocatable; *used* is the requests of every
  non-terminated pod **including Pending ones**; a node's idle room is its allocatable minus
  the requests of the pods bound to it.
* **Jobs**: the elastic ones (min < max). Only jobs whose pods are all Running are resized,
  unless some job has all its pods Pending: then every job may be (to make room for it).
* **Order**: by fulfillment ``(current - min) / (max - min)`` ascending, ties by GPU, then
  CPU, then memory request of a trainer (then name, for determinism).
* **Dry run**, repeated until a pass changes nothing: an *up* pass, least fulfilled first:
  +1 when below max, the cluster's free memory exceeds one trainer's, some node's idle room
  holds one trainer's CPU and memory (GPUs are not looked at per node, as in v0.1.0),
  ``cpu_total * max_load_desired - cpu_used >= cpu``, and for GPU jobs
  ``gpu_total * max_load_desired - gpu_used >= gpu``; above max it returns to max. Then a
  *down* pass, most fulfilled first: -1 when above max, or when CPU (or GPU) requests exceed
  ``total * max_load_desired`` and the job is above its min.

The GPU ceiling of the up pass is the same ``max_load_desired`` as the down pass's. Written
as ``gpu_total - gpu_used >= gpu`` (no ceiling, as the design's summary reads), the up pass
fills the last GPUs that the down pass then takes back (64 GPUs: up to 64, down above 62.08):
the dry run never settles, its last pass decides, and on a GPU cluster every 5 s loop
resized jobs up and down (700-1,940 rescales per job on the Philly dev set). The 2018 rule
is a fixed point of its two passes; with one ceiling it is again.

One deliberate difference: v0.1.0 *added* a planned trainer's requests to the chosen node's
idle room (a sign slip) so the per-node check kept passing on the same node; here the room
is taken, as the design intends. Nodes are searched in name order (v0.1.0 iterated a Go map).
"""

from __future__ import annotations

from dataclasses import dataclass

from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.policies.periodic import PeriodicPolicy
from edl_sim.cluster.policy import PolicySettings, SimulationView
from edl_sim.cluster.sim_cluster import SimCluster
from edl_sizing import Resources

_MAX_PASSES = 10_000


@dataclass
class _ClusterResource:
    """The autoscaler's view (``ClusterResource`` in v0.1.0), mutated by the dry run."""

    cpu_total: float
    cpu_used: float
    memory_total: float
    memory_used: float
    gpu_total: float
    gpu_used: float
    idle: dict[str, list[float]]
    """Node -> [cpu, memory] idle."""

    @classmethod
    def inquire(cls, cluster: SimCluster[JobRun]) -> _ClusterResource:
        used = sum((p.requests for p in cluster.pods.values()), Resources())
        total = cluster.allocatable
        idle = {n.name: [n.cpu, n.memory] for n in cluster.nodes}
        return cls(total.cpu, used.cpu, total.memory, used.memory, total.gpu, used.gpu, idle)

    def assignable_node(self, worker: Resources) -> str | None:
        for name, (cpu, memory) in self.idle.items():
            if worker.cpu <= cpu + 1e-9 and worker.memory <= memory + 1e-9:
                return name
        return None

    def add(self, worker: Resources, count: int, node: str | None) -> None:
        self.cpu_used += worker.cpu * count
        self.memory_used += worker.memory * count
        self.gpu_used += worker.gpu * count
        if node is not None:
            self.idle[node][0] -= worker.cpu * count
            self.idle[node][1] -= worker.memory * count


class Edl2018Policy(PeriodicPolicy):
    """The 2018 fulfillment rule, every 5 s."""

    name = "edl-2018"

    def __init__(self, settings: PolicySettings) -> None:
        super().__init__(settings.edl2018_interval)
        self._max_load = settings.max_load_desired

    def submitted(self, job: JobRun) -> None:
        """The trainer Job is created at its requested parallelism."""
        self.sim.scale(job, job.spec.requested)

    def finished(self, job: JobRun) -> None:
        """Nothing to do."""

    def round(self, sim: SimulationView) -> None:
        """Scale every resizable job to the fulfillment rule's target."""
        for job, target in self.plan(sim.cluster, list(sim.active.values())).items():
            if target != job.replicas:
                sim.scale(job, target)

    def plan(self, cluster: SimCluster[JobRun], active: list[JobRun]) -> dict[JobRun, int]:
        """The dry run: target parallelism per resizable job."""
        elastic = [j for j in active if j.min_workers < j.max_workers]
        running = {j.key: sum(1 for p in j.pods.values() if p.running) for j in elastic}
        have_pending = any(j.pods and running[j.key] == 0 for j in elastic)
        candidates = [
            j for j in elastic if have_pending or (j.pods and running[j.key] == len(j.pods))
        ]
        ordered = sorted(candidates, key=_order)
        r = _ClusterResource.inquire(cluster)
        diff = {j.key: 0 for j in ordered}
        for _ in range(_MAX_PASSES):
            changed = False
            for job in ordered:
                changed |= self._dry_run(r, job, diff, scale_down=False)
            for job in reversed(ordered):
                changed |= self._dry_run(r, job, diff, scale_down=True)
            if not changed:
                break
        return {j: j.replicas + diff[j.key] for j in ordered}

    def _dry_run(
        self, r: _ClusterResource, job: JobRun, diff: dict[str, int], scale_down: bool
    ) -> bool:
        worker = job.spec.worker
        planned = job.replicas + diff[job.key]
        low, high = job.min_workers, job.max_workers
        additional, node = 0, None
        if scale_down:
            if planned > high:
                additional = -1
            elif (
                r.gpu_used > r.gpu_total * self._max_load
                or r.cpu_used > r.cpu_total * self._max_load
            ) and planned > low:
                additional = -1
        elif planned >= high:
            additional = high - planned
        elif r.memory_total - r.memory_used > worker.memory:
            node = r.assignable_node(worker)
            if node is not None:
                cpu_ok = r.cpu_total * self._max_load - r.cpu_used >= worker.cpu
                if worker.gpu > 0:
                    gpu_ok = r.gpu_total * self._max_load - r.gpu_used >= worker.gpu
                    additional = int(cpu_ok and gpu_ok)
                else:
                    additional = int(cpu_ok)
        if additional == 0:
            return False
        r.add(worker, additional, node if additional > 0 else None)
        diff[job.key] += additional
        return True


def _order(job: JobRun) -> tuple[float, float, float, float, str]:
    low, high = job.min_workers, job.max_workers
    fulfillment = 1.0 if low == high else (job.replicas - low) / (high - low)
    w = job.spec.worker
    return (fulfillment, w.gpu, w.cpu, w.memory, job.key)
