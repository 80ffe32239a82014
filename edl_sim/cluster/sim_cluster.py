"""The simulated Kubernetes: nodes, pods, a kube-scheduler-like binder, Deployment scale-down.

Only what changes a sizing outcome is modelled:

* **Scheduling** (:meth:`SimCluster.schedule`): Pending pods in kube-scheduler's queue order
  (higher priority first, then older), each bound to a node it fits (requests against
  allocatable minus the requests of the pods bound there). Among the nodes that fit,
  ``spread`` takes the least allocated (kube-scheduler's default ``LeastAllocated`` score on
  CPU and memory), ``pack`` the most allocated. Ties go to the first node by name.
* **Preemption** (off by default, as in the 2018 experiment's Kubernetes 1.6): a pod that
  fits nowhere evicts lower-priority pods from the node where that costs least (lowest
  highest-victim priority, then fewest victims), lowest priority and newest first.
* **Start-up**: a bound pod is Running ``start_delay`` seconds later (the caller schedules
  it); only Running pods count as using the cluster (EDL's utilisation) and join a world.
* **Scale-down victims** (:func:`deletion_order`): unbound pods first, then the ones still
  starting, then the newest Running (the ReplicaSet controller's ranking, simplified).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from edl_sizing import Resources

J = TypeVar("J")
"""What a worker pod belongs to (the engine's `JobRun`): the cluster only tells workers from
services by it, so it does not import the jobs (which hold their pods)."""

_EPS = 1e-9
PLACEMENTS = ("spread", "pack")


def _le(need: float, have: float) -> bool:
    return need <= have + _EPS * max(1.0, abs(have))


class SimNode:
    """A node and the room its bound pods leave."""

    __slots__ = ("allocatable", "cpu", "gpu", "memory", "name", "pods")

    def __init__(self, name: str, allocatable: Resources) -> None:
        self.name = name
        self.allocatable = allocatable
        self.cpu = allocatable.cpu
        self.memory = allocatable.memory
        self.gpu = allocatable.gpu
        self.pods: dict[str, SimPod[Any]] = {}
        """Its bound pods (whatever they belong to)."""

    def fits(self, r: Resources) -> bool:
        """Whether ``r`` fits in the room left."""
        return _le(r.cpu, self.cpu) and _le(r.memory, self.memory) and _le(r.gpu, self.gpu)

    def take(self, r: Resources, sign: float = 1.0) -> None:
        """Take (or, with ``sign`` -1, give back) the room of ``r``."""
        self.cpu -= sign * r.cpu
        self.memory -= sign * r.memory
        self.gpu -= sign * r.gpu

    def free_share_after(self, r: Resources) -> float:
        """Mean free fraction of CPU and memory once ``r`` is placed (LeastAllocated)."""
        shares = []
        a = self.allocatable
        if a.cpu > 0:
            shares.append((self.cpu - r.cpu) / a.cpu)
        if a.memory > 0:
            shares.append((self.memory - r.memory) / a.memory)
        return sum(shares) / len(shares) if shares else 0.0


@dataclass(eq=False, slots=True)
class SimPod(Generic[J]):
    """A non-terminated pod."""

    name: str
    requests: Resources
    priority: int
    seq: int
    """Creation order (the scheduler's tie-break: older first)."""
    created: float
    job: J | None = None
    """The training job it is a worker of (None: a service pod)."""
    service: str | None = None
    node: SimNode | None = None
    bound_at: float | None = None
    running: bool = False

    @property
    def starting(self) -> bool:
        """Bound but not yet Running (phase Pending in Kubernetes)."""
        return self.node is not None and not self.running


@dataclass
class ClusterTotals:
    """Requests of the Running pods (EDL's utilisation numerator) and their count."""

    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    workers: int = 0
    """Running worker pods of training jobs."""
    services: int = 0
    """Running service (background) pods."""


@dataclass
class SimCluster(Generic[J]):
    """Nodes and live pods; binding, preemption, deletion."""

    nodes: list[SimNode]
    placement: str = "spread"
    preemption: bool = False
    pods: dict[str, SimPod[J]] = field(default_factory=dict)
    pending: dict[str, SimPod[J]] = field(default_factory=dict)
    running: ClusterTotals = field(default_factory=ClusterTotals)
    dirty: bool = True
    """Something changed since the last scheduling pass (new pod, freed room)."""
    freed: int = 0
    """Counts the times room was given back (a bound pod deleted)."""
    _seq: int = 0

    def __post_init__(self) -> None:
        self.nodes.sort(key=lambda n: n.name)
        self.allocatable = sum((n.allocatable for n in self.nodes), Resources())

    # -- pods -----------------------------------------------------------------------------

    def create_pod(
        self,
        name: str,
        requests: Resources,
        priority: int,
        now: float,
        job: J | None = None,
        service: str | None = None,
    ) -> SimPod[J]:
        """A new Pending pod."""
        self._seq += 1
        pod = SimPod(name, requests, priority, self._seq, now, job, service)
        self.pods[name] = pod
        self.pending[name] = pod
        self.dirty = True
        return pod

    def bind(self, pod: SimPod[J], node: SimNode, now: float) -> None:
        """Put a Pending pod on ``node``."""
        del self.pending[pod.name]
        pod.node, pod.bound_at = node, now
        node.pods[pod.name] = pod
        node.take(pod.requests)

    def mark_running(self, pod: SimPod[J]) -> None:
        """The pod's containers started."""
        pod.running = True
        self._count(pod, 1)

    def delete(self, pod: SimPod[J]) -> None:
        """The pod is gone (its room is free at once; ``running`` keeps what it was)."""
        del self.pods[pod.name]
        if pod.node is None:
            del self.pending[pod.name]
        else:
            pod.node.take(pod.requests, -1.0)
            del pod.node.pods[pod.name]
            self.dirty = True
            self.freed += 1
        if pod.running:
            self._count(pod, -1)

    def _count(self, pod: SimPod[J], sign: int) -> None:
        t, r = self.running, pod.requests
        t.cpu += sign * r.cpu
        t.memory += sign * r.memory
        t.gpu += sign * r.gpu
        if pod.job is not None:
            t.workers += sign
        elif pod.service is not None:
            t.services += sign

    # -- scheduling -----------------------------------------------------------------------

    def best_node(
        self, requests: Resources, job: J | None = None, planned: dict[str, int] | None = None
    ) -> SimNode | None:
        """The node the scheduler would pick for a pod of ``requests`` (None: none fits).

        A worker of ``job`` prefers the nodes with the most pods of its job (bound ones, plus
        ``planned`` ones by node name during a gang's dry run).
        """
        best: SimNode | None = None
        best_score = (0, 0.0)
        pack = self.placement == "pack"
        for node in self.nodes:
            if not node.fits(requests):
                continue
            share = node.free_share_after(requests)
            affinity = 0
            if job is not None:
                affinity = sum(1 for p in node.pods.values() if p.job is job)
                affinity += (planned or {}).get(node.name, 0)
            score = (affinity, -share if pack else share)
            if (
                best is None
                or score[0] > best_score[0]
                or (score[0] == best_score[0] and score[1] > best_score[1] + 1e-12)
            ):
                best, best_score = node, score
        return best

    def schedule(self, now: float) -> tuple[list[SimPod[J]], list[SimPod[J]]]:
        """One scheduling pass: (pods bound, pods evicted by preemption)."""
        bound: list[SimPod[J]] = []
        evicted: list[SimPod[J]] = []
        if not self.dirty or not self.pending:
            self.dirty = False
            return bound, evicted
        self.dirty = False
        failed: set[tuple[float, float, float, int]] = set()
        for pod in sorted(self.pending.values(), key=lambda p: (-p.priority, p.seq)):
            r = pod.requests
            signature = (r.cpu, r.memory, r.gpu, pod.priority if self.preemption else 0)
            if signature in failed:
                continue
            node = self.best_node(r, pod.job)
            if node is None and self.preemption:
                found = self._preemption(pod)
                if found is not None:
                    node, victims = found
                    for victim in victims:
                        self.delete(victim)
                    evicted.extend(victims)
            if node is None:
                failed.add(signature)
                continue
            self.bind(pod, node, now)
            bound.append(pod)
        return bound, evicted

    def _preemption(self, pod: SimPod[J]) -> tuple[SimNode, list[SimPod[J]]] | None:
        best: tuple[tuple[int, int, str], SimNode, list[SimPod[J]]] | None = None
        r = pod.requests
        for node in self.nodes:
            lower = sorted(
                (p for p in node.pods.values() if p.priority < pod.priority),
                key=lambda p: (p.priority, -p.seq),
            )
            room = Resources(node.cpu, node.memory, node.gpu)
            victims: list[SimPod[J]] = []
            for victim in lower:
                if r.fits_in(room):
                    break
                victims.append(victim)
                room = room + victim.requests
            if not victims or not r.fits_in(room):
                continue
            cost = (max(v.priority for v in victims), len(victims), node.name)
            if best is None or cost < best[0]:
                best = (cost, node, victims)
        return None if best is None else (best[1], best[2])

    def plan_gang(
        self, requests: Resources, count: int, job: J | None = None
    ) -> list[SimNode] | None:
        """Nodes for ``count`` pods of ``requests`` placed one by one, or None if not all fit.

        Nothing changes: the room is taken on trial and given back.
        """
        chosen: list[SimNode] = []
        planned: dict[str, int] = {}
        for _ in range(count):
            node = self.best_node(requests, job, planned)
            if node is None:
                break
            node.take(requests)
            chosen.append(node)
            planned[node.name] = planned.get(node.name, 0) + 1
        for node in chosen:
            node.take(requests, -1.0)
        return chosen if len(chosen) == count else None


def deletion_order(pods: Iterable[SimPod[J]]) -> list[SimPod[J]]:
    """The order a ReplicaSet scale-down removes pods in (first = removed first)."""
    return sorted(pods, key=lambda p: (p.node is not None, p.running, -p.seq))


def build_nodes(groups: Sequence[tuple[str, int, Resources]]) -> list[SimNode]:
    """``count`` nodes per group, named ``<group>-<i>`` (zero-padded so name order is numeric)."""
    nodes: list[SimNode] = []
    for name, count, allocatable in groups:
        width = len(str(count))
        nodes.extend(SimNode(f"{name}-{i:0{width}d}", allocatable) for i in range(count))
    return nodes
