"""The sizing decision: how many workers each elastic job should run now.

A pure function of its inputs (nodes, pods, jobs, policy, ``now``): no clock, no I/O, the
same inputs always give the same plan. One round, in order:

1. **What runs.** Every bound pod takes its requests from its node; a node's room is its
   allocatable minus those requests minus the policy's headroom. Only Ready, schedulable
   nodes offer room; taints the pod does not tolerate and node selectors are respected.
2. **Fallback.** A job whose description is bad (``Job.error``, min > max, a negative
   weight, a worker that requests nothing) keeps its current replicas (reason
   ``fallback``); its workers keep their room, nothing else about it changes.
3. **Claims, by priority.** Pending pods that are not a job's workers and whose priority is
   at least the lowest job priority are *protected demand*; a waiting job (fewer workers
   than its minimum) claims its minimum. Claims are served highest priority first, pods
   before jobs at equal priority, larger pods first (first-fit decreasing). A claim that
   does not fit takes the room of extra workers (above their minimum) of jobs of no higher
   priority, lowest marginal value first, on the node where that costs least; those jobs
   shrink at once (reason ``protected_demand``). A job minimum that cannot be met even so
   waits (reason ``waiting``; it is served its minimum and takes nothing).
4. **Granted workers.** A job's workers that are created but not yet bound keep their place
   while they fit (they were granted in an earlier round).
5. **Growth.** One worker at a time to the job with the highest
   ``weight * relative speed-up / dominant share of one worker``, the relative speed-up being
   the share by which the worker speeds its own job up, ``log(S(n + 1) / S(n))`` (a job
   already growing this round counts ``rescale_margin`` times that: it rescales anyway, so
   scarce room goes to fewer jobs in larger steps), while the job is below
   its maximum, a worker fits a node, the marginal speed-up is at least the job's
   threshold, the job's last growth is older than the hold-off, and the size stays within
   ``exploration`` x the largest size measured. A job's growth in the round must pay back
   its measured rescale pause within ``payback_s``, or it is undone.

Every job gets one reason for the size it ended at (the ``limited_by`` vocabulary of
docs/metrics-contract.md) and a one-line message, e.g. "grew to 6: 2 CPUs free on node-3,
marginal speed-up 0.71".
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edl_sizing.cluster import Job, Node, Pod, Quota
from edl_sizing.packing import Packing
from edl_sizing.queues import QueueDemand, QueueQuota
from edl_sizing.resources import Resources
from edl_sizing.scaling import ScalingCurve, ScalingPrior, SizeModel, size_model


class Reason(enum.Enum):
    """What stopped a job at its size (``edl_adapter_sizing_limited_by{reason}``)."""

    AT_MAX = "at_max"
    NO_CAPACITY = "no_capacity"
    PLACEMENT = "placement"
    """It shrinks: fewer workers on fewer nodes train faster than its placement."""
    FAIRNESS = "fairness"
    """Its workers beyond its request went back to a job below its own."""
    LOW_MARGINAL_GAIN = "low_marginal_gain"
    HOLD_OFF = "hold_off"
    PROTECTED_DEMAND = "protected_demand"
    WAITING = "waiting"
    FALLBACK = "fallback"
    QUEUE_QUOTA = "queue_quota"
    """Its Kueue ClusterQueue admits no more of its workers."""


@dataclass(frozen=True, slots=True)
class SizingPolicy:
    """Cluster-wide knobs of the decision."""

    headroom: Resources = field(default_factory=Resources)
    """Kept free on every node (never planned for workers)."""
    hold_off_s: float = 60.0
    """No growth within this many seconds of the job's last growth."""
    payback_s: float = 300.0
    """A growth must make up for its rescale pause within this many seconds."""
    exploration: float = 2.0
    """Never grow beyond this multiple of the largest size measured (at least 1 assumed)."""
    rescale_margin: float = 2.0
    """How much more a worker must be worth to cost a job a rescale it would not have this
    round (>= 1): free room goes to a job already growing while its next worker is worth
    at least 1/margin of the best other's, so it is given in fewer, larger steps."""
    prior: ScalingPrior = field(default_factory=ScalingPrior)
    hysteresis: float = 0.05
    """A round's growth must raise the job's predicted speed by at least this share, or it
    is not made (a size is not left for a predicted gain within the model's noise)."""
    rescale_budget_per_hour: int = 8
    """A job that rescaled this many times in the last hour (``Job.recent_rescales``) neither
    grows (but back to its request) nor gives workers to another job's growth; only
    protected demand and the arrival reserve (where it gives last) shrink it."""
    arrival_reserve: float = 0.05
    """Growth beyond a job's request leaves this share of the cluster's workers free (whole
    workers of the jobs' most common size, rounded down), and when arrivals took it, the
    extras beyond requests worth least give it back: a job that arrives starts at once, as
    under static sizing, instead of waiting for a round, a donor's HPA and its pod's
    deletion (about 20 s)."""
    arrival_window_s: float = 600.0
    """The reserve holds no more than the jobs that arrived this recently requested."""


@dataclass(frozen=True, slots=True)
class JobDecision:
    """The outcome for one job."""

    job: str
    """``namespace/name``."""
    current: int
    desired: int
    limited_by: Reason
    message: str
    marginal_speedup: float
    """What one more worker would add at ``desired``, relative to one worker."""
    min_replicas: int
    max_replicas: int
    curve: ScalingCurve
    nodes: Mapping[str, int] = field(default_factory=dict)
    """Planned workers per node (bound ones on nodes that offer no room are not listed)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the debug endpoint)."""
        return {
            "job": self.job,
            "current": self.current,
            "desired": self.desired,
            "limitedBy": self.limited_by.value,
            "message": self.message,
            "marginalSpeedup": round(self.marginal_speedup, 4),
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "curve": {
                "sigma": round(self.curve.sigma, 6),
                "kappa": round(self.curve.kappa, 6),
                "samplesPerSecondAtOne": self.curve.lam,
                "sizesMeasured": self.curve.sizes,
                "largestMeasured": self.curve.largest,
            },
            "nodes": dict(self.nodes),
        }


@dataclass(frozen=True, slots=True)
class Demand:
    """A protected pending pod and where the dry run put it (``node`` None: nowhere)."""

    pod: str
    priority: int
    requests: Resources
    node: str | None


@dataclass(frozen=True, slots=True)
class Plan:
    """One round's decisions and the capacity it saw."""

    now: float
    jobs: Mapping[str, JobDecision]
    """By job key."""
    allocatable: Resources
    """Summed over Ready, schedulable nodes."""
    free: Resources
    """Free room (after headroom) summed over those nodes, before the plan."""
    protected: tuple[Demand, ...] = ()
    node_free: Mapping[str, Resources] = field(default_factory=dict)
    """Room left per node after the plan."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the debug endpoint)."""
        return {
            "now": self.now,
            "allocatable": self.allocatable.to_dict(),
            "free": self.free.to_dict(),
            "protectedPending": [
                {
                    "pod": d.pod,
                    "priority": d.priority,
                    "requests": d.requests.to_dict(),
                    "node": d.node,
                }
                for d in self.protected
            ],
            "nodeFree": {name: r.to_dict() for name, r in sorted(self.node_free.items())},
            "jobs": [self.jobs[k].to_dict() for k in sorted(self.jobs)],
        }


def job_error(job: Job) -> str | None:
    """Why the job cannot be sized (None: it can)."""
    if job.error:
        return job.error
    if job.min_replicas < 0 or job.max_replicas < 1:
        return f"min {job.min_replicas} / max {job.max_replicas} workers: need min >= 0, max >= 1"
    if job.min_replicas > job.max_replicas:
        return f"min {job.min_replicas} is above max {job.max_replicas} workers"
    if not (math.isfinite(job.weight) and job.weight >= 0):
        return f"weight {job.weight} must be a number >= 0"
    if not math.isfinite(job.min_marginal_speedup):
        return f"min marginal speed-up {job.min_marginal_speedup} is not a number"
    if job.worker.is_zero:
        return "its pod template requests no CPU, memory or GPU: one worker's size is unknown"
    return None


@dataclass(slots=True)
class _State:
    """A job during the round (mutable)."""

    job: Job
    model: SizeModel
    share: float
    count: int
    error: str | None = None
    reason: Reason | None = None
    waiting: bool = False
    shrunk_for: list[tuple[str, int]] = field(default_factory=list)
    """(pod or job key, its priority) this job gave workers up for."""
    grown: list[str] = field(default_factory=list)
    """Nodes the workers added this round went to."""
    room_before: dict[str, Resources] = field(default_factory=dict)
    """Free room of each node this round's growth used, before the round's first worker."""
    granted: int = 0
    """Created-but-unbound workers kept this round (the job grows: it is no one's donor)."""
    quota: str | None = None
    """The ResourceQuota that admits no more of its workers (its growth stopped there)."""
    queue: str | None = None
    """The Kueue ClusterQueue that admits no more of its workers (its growth stopped there)."""
    picks: list[tuple[int, ...]] = field(default_factory=list)
    """The flavors its Kueue ClusterQueue gave each of this round's workers beyond the
    admitted ones (what a release gives back)."""
    took: list[tuple[_State, str]] = field(default_factory=list)
    """(donor, node) of each worker this job's growth took from another job this round."""
    gave: list[tuple[str, float, float]] = field(default_factory=list)
    """(job key, marginal speed-up there, marginal speed-up here) of each worker this job
    gave up to a job where it is worth more."""
    start: int = 0
    """Its workers when growth began (what the round's growth is judged against)."""
    start_nodes: frozenset[str] = frozenset()
    """The nodes they were on."""
    repacked: tuple[int, float, float, int] | None = None
    """(size, its speed-up at worst, the speed-up now, nodes spanned now) when the job
    shrinks because fewer workers train faster than its placement."""
    reclaimed: int = 0
    """Workers it took back towards its request this round (from free room or extras)."""
    fairness: float | None = None
    """Its finish-time fairness at the round's start (:meth:`rho`; None: not known)."""
    returned: list[str] = field(default_factory=list)
    """Jobs below their requests that this round's extras beyond its request went back to."""
    memo: dict[tuple[int, ...], float] = field(default_factory=dict)
    """Growth values by (workers, nodes, room on its nodes, limit): a round asks often."""
    values: dict[tuple[int, int, int], float] = field(default_factory=dict)
    """:meth:`value` by its arguments: displacement asks the same of every node a job is on."""
    spill_room: tuple[int, ...] = ()
    """Workers of its size that fit on the roomiest nodes, most first (at growth's start)."""
    floor_at: int | None = None
    local_at: tuple[Packing, int, int] | None = None
    """(packing, its version, :meth:`local_room` there): asked again before anything moved."""

    @property
    def curve(self) -> ScalingCurve:
        """The USL fit of the job's measurements (what the decision reports)."""
        return self.model.curve

    def value(self, n: int, nodes: int = 0, nodes_without: int = 0) -> float:
        """Marginal value of the job's n-th worker: what removing it costs.

        ``weight * log(S(n) / S(n - 1)) / share``: the share of the job's speed the worker
        gives (not its speed-up in workers), so a worker is worth more to a job at 8 than to
        one at 28 of the same class though it adds about as many samples to either. The sum
        over jobs of ``weight * log(speed)`` is what growth and displacement raise. With
        ``nodes`` (spanned with the worker) and ``nodes_without``, the speed-ups are those
        of the placements: a worker alone on a node can cost its job speed, and is then
        worth less than nothing to it.
        """
        key = (n, nodes, nodes_without)
        known = self.values.get(key)
        if known is not None:
            return known
        here = self.model.placed_speedup(n, nodes) if nodes else self.model.speedup(n)
        less = self.model.placed_speedup(n - 1, nodes_without) if nodes else None
        if less is None:
            less = self.model.speedup(n - 1)
        value = self.values[key] = self.job.weight * _log_ratio(less, here) / max(self.share, 1e-12)
        return value

    def growth_value(self, policy: SizingPolicy, packing: Packing | None = None) -> float:
        """What the next worker is worth to growth: the best mean gain over the next node.

        With ``packing``, on the placements growth would reach: the room left on the job's
        nodes first, then new nodes (:meth:`span_if`).
        """
        n, limit = self.count, self.growth_limit(policy)
        if packing is None:
            gains = (_log_gain(self.model, n, m) / (m - n) for m in range(n + 1, limit + 1))
            return self.job.weight * max(gains, default=0.0) / max(self.share, 1e-12)
        local = self.local_room(packing)
        key = (n, self.nodes_now(packing), local, limit)
        best = self.memo.get(key)
        if best is None:
            here = self.speed_now(packing)
            best = self.memo[key] = max(
                (_log_ratio(here, self.speed_if(packing, m, local)) / (m - n)
                 for m in range(n + 1, limit + 1)),
                default=0.0,
            )  # fmt: skip
        return self.job.weight * best / max(self.share, 1e-12)

    def nodes_now(self, packing: Packing) -> int:
        """Nodes its planned workers span now."""
        return len(packing.workers.get(self.job.key, ()))

    def speed_now(self, packing: Packing) -> float:
        """Predicted speed-up on its planned placement."""
        return self.model.placed_speedup(self.count, self.nodes_now(packing))

    def local_room(self, packing: Packing) -> int:
        """More workers that fit on the nodes it is on."""
        seen = self.local_at
        if seen is not None and seen[0] is packing and seen[1] == packing.version:
            return seen[2]
        job = self.job
        local = sum(
            _fits(job.worker, packing.free[node])
            for node in packing.workers.get(job.key, ())
            if node in packing.free
        )
        self.local_at = (packing, packing.version, local)
        return local

    def speed_if(self, packing: Packing, m: int, local: int) -> float:
        """Predicted speed-up at ``m`` workers grown node-local first, then onto new nodes.

        The workers that do not fit its nodes go to the nodes with the most room first (as
        the scheduler places them), so they span as many nodes as the room there dictates
        (``spill_room``, the room of the roomiest nodes at the round's growth); beyond that
        room, full nodes.
        """
        spill = m - self.count - local
        nodes = self.nodes_now(packing)
        for room in self.spill_room:
            if spill <= 0:
                break
            spill -= room
            nodes += 1
        if spill > 0:
            nodes += -(-spill // self.model.per_node)
        return self.model.placed_speedup(m, nodes)

    def planned_speed(self, n: int) -> float:
        """Predicted speed-up at ``n`` workers of the round's growth, on the nodes it planned."""
        if n <= self.start:
            return self.model.placed_speedup(n, len(self.start_nodes)) if n else 0.0
        nodes = self.start_nodes.union(self.grown[: n - self.start])
        return self.model.placed_speedup(n, len(nodes))

    def rho(self, now: float) -> float | None:
        """Finish-time fairness (Themis): predicted completion over completion at its request.

        ``(elapsed + remaining at its speed now) / (planned samples at its request's speed)``
        from its arrival: above 1 it finishes later than static sizing would have finished
        it, had static started it at once. None without its progress or planned samples.
        """
        job = self.job
        if job.progress is None or job.planned_samples <= 0:
            return None
        request = self.model.throughput(max(1, min(job.requested, job.max_replicas)))
        speed = self.model.throughput(max(self.count, 1))
        if request is None or speed is None or request <= 0:
            return None
        alone = job.planned_samples / request
        if self.count <= 0:
            return math.inf
        left = (1.0 - min(1.0, job.progress)) * job.planned_samples / speed
        return (max(0.0, now - job.arrival) + left) / alone

    def growth_limit(self, policy: SizingPolicy) -> int:
        """The largest size growth may plan: max, exploration cap, one node ahead.

        Or further, up to the largest size measured: a measured size is known, so growth may
        jump over a measured dip to it (one node ahead alone would stop in front of the dip).
        """
        job = self.job
        base = max(self.model.largest, job.requested, 1)
        cap = math.floor(policy.exploration * base + 1e-9)
        ahead = max(self.count + self.model.per_node, self.model.largest)
        return min(job.max_replicas, cap, ahead)

    def floor(self) -> int:
        """Fewest workers another job's growth may leave it.

        Its request, unless a smaller size was measured at least as fast as the request.
        """
        if self.floor_at is not None:
            return self.floor_at
        job = self.job
        requested = min(job.requested, job.max_replicas)
        self.floor_at = requested
        if requested <= job.min_replicas:
            self.floor_at = job.min_replicas
        else:
            at_request = self.model.points.get(requested)
            faster = at_request * (1.0 + job.spread) if at_request is not None else math.inf
            if any(x >= faster for n, x in self.model.points.items() if n < requested):
                self.floor_at = job.min_replicas
        return self.floor_at

    def over_budget(self, policy: SizingPolicy) -> bool:
        """Whether it has used its rescales for this hour.

        It then grows no further than its request: below it, protected demand (or a job
        short of its own request) took its workers, and growing back undoes a shrink that
        was not its choice. Shrinks for protected demand count in the job's rescales, so
        without that a job shrunk eight times for new arrivals stayed small for an hour
        beside free room (the GPU trace's job-092: at 8 of the 16 it asked for, with 23
        GPUs free).
        """
        return self.job.recent_rescales >= policy.rescale_budget_per_hour


_SPILL_NODES = 16
"""How many of the roomiest nodes growth's spill-over is predicted on (beyond: full nodes)."""

_FIRST_WORKER = 1e6
"""The log gain of a job's first worker (from no speed at all): more than any other."""


def _log_gain(model: SizeModel, n: int, m: int) -> float:
    """``log(S(m) / S(n))``: by what share going from n to m workers speeds the job up."""
    return _log_ratio(model.speedup(n), model.speedup(m))


def _log_ratio(here: float, there: float) -> float:
    """``log(there / here)``, a first worker (from nothing) worth more than any other."""
    if there <= 0:
        return -_FIRST_WORKER
    if here <= 0:
        return _FIRST_WORKER
    return math.log(there / here)


def _fits(worker: Resources, room: Resources) -> int:
    """Workers of this size that fit in ``room`` (0 when none)."""
    fit: int | None = None
    if worker.cpu > 0:
        fit = math.floor(room.cpu / worker.cpu + 1e-9)
    if worker.memory > 0:
        count = math.floor(room.memory / worker.memory + 1e-9)
        fit = count if fit is None or count < fit else fit
    if worker.gpu > 0:
        count = math.floor(room.gpu / worker.gpu + 1e-9)
        fit = count if fit is None or count < fit else fit
    return max(0, fit) if fit is not None else 0


def decide(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    jobs: Sequence[Job],
    policy: SizingPolicy = SizingPolicy(),
    now: float = 0.0,
    quotas: Sequence[Quota] = (),
    queues: Sequence[QueueQuota] = (),
    waiting: Sequence[QueueDemand] = (),
) -> Plan:
    """One sizing round (see the module docstring); pure and deterministic.

    ``quotas``: what each namespace's ResourceQuotas still admit; growth never plans a new
    worker pod that one of them would refuse. ``queues``: what each Kueue ClusterQueue still
    admits; no job is planned a worker beyond its admitted ones that its queue
    (``Job.queue``) would leave waiting. ``waiting``: workloads waiting in a queue without a
    pod yet (a pod waiting in one says so in ``Pod.queue``); they get its room first.
    """
    eligible = [n for n in sorted(nodes, key=lambda n: n.name) if n.ready and n.schedulable]
    allocatable = sum((n.allocatable for n in eligible), Resources())
    states: dict[str, _State] = {}
    room = {n.name: n.allocatable - policy.headroom for n in eligible}
    per_node_of: dict[Resources, int] = {}
    for job in sorted(jobs, key=lambda j: j.key):
        if job.key not in states:
            per_node = per_node_of.get(job.worker)
            if per_node is None:
                per_node = max((_how_many(job.worker, r) for r in room.values()), default=1)
                per_node_of[job.worker] = per_node
            model = size_model(job.observed, per_node, policy.prior, job.placed, job.spread)
            states[job.key] = _State(job, model, job.worker.dominant_share(allocatable), 0)
            states[job.key].error = job_error(job)
    packing = Packing(eligible, room)
    bound: list[tuple[str, Resources, str | None]] = []
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.node is None:
            continue
        owner = states.get(pod.job) if pod.job is not None else None
        if owner is not None:
            owner.count += 1
        if pod.node in packing.free:
            if owner is not None and owner.error is None:
                bound.append((pod.node, owner.job.worker, owner.job.key))
            else:
                bound.append((pod.node, pod.requests, None))
    packing.place_all(bound)
    free = sum((r.clamped() for r in packing.free.values()), Resources())
    valid = [s for s in states.values() if s.error is None]
    for s in valid:
        _trim_to_max(packing, s)
    for s in valid:
        s.fairness = s.rho(now)
    demands = _serve_claims(packing, states, valid, pods)
    kueue = _Queues(queues)
    _serve_queue_demand(packing, valid, _queue_demands(pods, waiting), kueue)
    kueue.hold(valid)
    _keep_granted(packing, valid, policy, kueue)
    _repack(packing, valid, policy)
    reserve = _Reserve(packing, *_reserve_room(valid, room.values(), policy, now))
    _keep_reserve(packing, valid, policy, reserve)
    _grow(packing, valid, policy, now, _Quotas(quotas), reserve, kueue)
    decisions = {k: _decision(s, packing.workers.get(k, {})) for k, s in states.items()}
    return Plan(now, decisions, allocatable, free, tuple(demands), dict(packing.free))


def _how_many(worker: Resources, room: Resources) -> int:
    """Workers of this size that fit in ``room``."""
    pairs = ((worker.cpu, room.cpu), (worker.memory, room.memory), (worker.gpu, room.gpu))
    counts = [math.floor(have / need + 1e-9) for need, have in pairs if need > 0]
    return max(1, min(counts)) if counts else 1


def _trim_to_max(packing: Packing, s: _State) -> None:
    key, worker = s.job.key, s.job.worker
    while s.count > s.job.max_replicas:
        placed = packing.workers.get(key, {})
        if placed:
            node = max(placed, key=lambda n: (placed[n], n))
            packing.release(node, worker, key)
        s.count -= 1
        s.reason = Reason.AT_MAX


def _serve_claims(
    packing: Packing, states: dict[str, _State], valid: list[_State], pods: Sequence[Pod]
) -> list[Demand]:
    if not valid:
        return []
    lowest = min(s.job.priority for s in valid)
    total = sum((n.allocatable for n in packing.nodes), Resources())
    claims: list[tuple[tuple[Any, ...], Pod | _State]] = []
    for pod in pods:
        if pod.node is None and pod.job not in states and pod.priority >= lowest:
            order = (-pod.priority, 0, -pod.requests.dominant_share(total), pod.key)
            claims.append((order, pod))
    for s in valid:
        if s.count < s.job.min_replicas:
            claims.append(((-s.job.priority, 1, s.job.arrival, s.job.key), s))
    demands = []
    refused = _Refused()
    for _, claim in sorted(claims, key=lambda c: c[0]):
        if isinstance(claim, Pod):
            demands.append(_place_pod(packing, states, claim, refused))
        else:
            refused.clear()  # a minimum may take workers, or give back what it took
            _place_minimum(packing, states, claim)
    _reclaim_requests(packing, states, valid)
    return demands


class _Refused:
    """Pending pods no room could be made for, since room was last made for one.

    Claims come in priority order, and until `_make_room` frees room (or a job's minimum is
    placed) room and donors only shrink: a pod that asks at least as much of every resource,
    at no higher priority, with the same tolerations and node selector, finds none either.
    On a full cluster hundreds of Pending pods of other work ask the same few shapes; each
    would search every node for workers to take.
    """

    def __init__(self) -> None:
        self._by_shape: dict[tuple[Any, ...], list[tuple[Resources, int]]] = {}

    @staticmethod
    def _shape(pod: Pod) -> tuple[Any, ...]:
        return (pod.tolerations, tuple(sorted(pod.node_selector.items())))

    def covers(self, pod: Pod) -> bool:
        """Whether a pod refused before asked no more than ``pod``, at no lower priority."""
        r = pod.requests
        return any(
            q.cpu <= r.cpu and q.memory <= r.memory and q.gpu <= r.gpu and priority >= pod.priority
            for q, priority in self._by_shape.get(self._shape(pod), ())
        )

    def add(self, pod: Pod) -> None:
        self._by_shape.setdefault(self._shape(pod), []).append((pod.requests, pod.priority))

    def clear(self) -> None:
        self._by_shape.clear()


def _reclaim_requests(packing: Packing, states: dict[str, _State], valid: list[_State]) -> None:
    """A job below its request takes it back: from free room, then from extras beyond requests.

    What static sizing gives every running job, its request, comes before any job's growth
    beyond its own: a job below it (shrunk for protected demand or another job's minimum,
    or started where others' extras held the room) is not held there for another job's
    growth. It takes free room on its own nodes first, then anywhere, then workers of jobs
    of no higher priority above their own requests (never below them), whatever their value.
    The job furthest behind static sizing goes first (finish-time fairness, Themis), then
    the oldest. Neither the hold-off nor the rescale budget applies: this undoes a shrink.
    """
    behind = [s for s in valid if not (s.waiting or s.shrunk_for) and s.count < s.floor()]
    order = sorted(behind, key=lambda s: (-(s.fairness or 0.0), s.job.arrival, s.job.key))
    for s in order:
        job = s.job
        saved = packing.savepoint()
        counts = {k: st.count for k, st in states.items()}
        before = s.speed_now(packing)
        donors: list[_State] = []
        while s.count < s.floor():
            node = packing.local_fit(job.key, job.worker, job.tolerations, job.node_selector)
            if node is None:
                found = _make_room(
                    packing, states, job.worker, job, job.priority, job.key,
                    requests_held=True, own_first=True, full=True,
                )  # fmt: skip
                if found is None:
                    break
                node, removals = found
                for donor_key, on in removals:
                    donor = states[donor_key]
                    packing.release(on, donor.job.worker, donor_key)
                    donor.count -= 1
                    donors.append(donor)
            packing.place(node, job.worker, job.key)
            s.count += 1
            s.reclaimed += 1
        if s.reclaimed and s.speed_now(packing) <= before:
            packing.rollback(saved)  # on the room there is, its request trains no faster
            for key, count in counts.items():
                states[key].count = count
            s.reclaimed = 0
            continue
        packing.commit(saved)
        for donor in donors:
            donor.returned.append(job.key)


def _place_pod(
    packing: Packing, states: dict[str, _State], pod: Pod, refused: _Refused | None = None
) -> Demand:
    node = packing.first_fit(pod.requests, pod.tolerations, pod.node_selector)
    if node is None and not (refused is not None and refused.covers(pod)):
        found = _make_room(packing, states, pod.requests, pod, pod.priority, None, full=True)
        if found is None and refused is not None:
            refused.add(pod)
        if found is not None:
            if refused is not None:
                refused.clear()
            node, removals = found
            for job_key, on in removals:
                s = states[job_key]
                packing.release(on, s.job.worker, job_key)
                s.count -= 1
                s.shrunk_for.append((pod.key, pod.priority))
    if node is not None:
        packing.place(node, pod.requests)
    return Demand(pod.key, pod.priority, pod.requests, node)


def _place_minimum(packing: Packing, states: dict[str, _State], s: _State) -> None:
    """Places the job's minimum as one transaction: all of it, or nothing (it waits)."""
    saved = packing.savepoint()
    trial = packing
    counts = {k: st.count for k, st in states.items()}
    shrunk: list[str] = []
    job = s.job
    for _ in range(job.min_replicas - s.count):
        node = trial.first_fit(job.worker, job.tolerations, job.node_selector)
        if node is None:
            found = _make_room(
                trial, states, job.worker, job, job.priority, job.key, counts,
                fair=True, full=True,
            )  # fmt: skip
            if found is None:
                s.waiting = True
                packing.rollback(saved)
                return
            node, removals = found
            for job_key, on in removals:
                trial.release(on, states[job_key].job.worker, job_key)
                counts[job_key] -= 1
                shrunk.append(job_key)
        trial.place(node, job.worker, job.key)
        counts[job.key] += 1
    packing.commit(saved)
    for job_key in shrunk:
        states[job_key].shrunk_for.append((job.key, job.priority))
    for job_key, count in counts.items():
        states[job_key].count = count


def _make_room(
    packing: Packing,
    states: dict[str, _State],
    requests: Resources,
    who: Pod | Job,
    priority: int,
    exclude: str | None,
    counts: Mapping[str, int] | None = None,
    cost_limit: float = math.inf,
    consolidate: bool = False,
    requests_held: bool = False,
    fair: bool = False,
    ignore_free: bool = False,
    own_first: bool = False,
    full: bool = False,
) -> tuple[str, list[tuple[str, str]]] | None:
    """The cheapest node and the extra workers to remove there so that ``requests`` fits.

    With ``cost_limit``, what is removed must be worth less than that in all. With
    ``consolidate`` (room for growth), workers of jobs that already give some up this round
    go first (fewer jobs rescale), then the lowest marginal value; otherwise (claims) workers
    beyond their jobs' requests go before any within a request, then the lowest marginal
    value. No job goes below its minimum, nor below its :meth:`_State.floor` with
    ``requests_held`` (the worker gained is beyond the grower's own request: an extra never
    costs another job its request). With ``fair`` (another job's minimum), a job behind
    static sizing (finish-time fairness 1 or more, :meth:`_State.rho`) keeps its request,
    and of those cut below theirs the one furthest ahead goes first.
    Nodes where ``exclude`` (the job that gains) already is go first among equal costs. With
    ``ignore_free`` the node's free room is left free: what is removed must hold ``requests``.
    With ``own_first``, its nodes go first whatever the cost (a job's speed depends on them).
    With ``full`` (the caller found no node with free room for ``requests``), only the nodes
    where a job may give a worker up are searched.
    """
    best: tuple[tuple[int, int, int, float, int, int, str], list[tuple[str, str]]] | None = None
    own = packing.workers.get(exclude, {}) if exclude is not None else {}
    checked: set[str] = set()
    givers: set[str] = set()
    """Of the jobs seen (``checked``), those that may give a worker up at all (before any is
    taken): a node without one gives nothing, so only its free room is looked at."""
    nodes = packing.reclaimable(requests, who.tolerations, who.node_selector)
    if full and nodes:
        checked.update(states)
        givers.update(
            k for k, s in states.items()
            if _may_give(s, k, exclude, priority, counts, requests_held, fair)
        )  # fmt: skip
        if cost_limit < math.inf and not _any_cheaper(packing, states, givers, counts, cost_limit):
            return None
        near = set().union(*(packing.workers.get(k, ()) for k in givers))
        nodes = [n for n in nodes if n.name in near]
    for node in nodes:
        room = Resources() if ignore_free else packing.free[node.name]
        on = packing.by_node.get(node.name)
        if on and (unseen := on.keys() - checked):
            checked |= unseen
            givers.update(
                k for k in unseen
                if (s := states.get(k)) is not None
                and _may_give(s, k, exclude, priority, counts, requests_held, fair)
            )  # fmt: skip
        if not on or givers.isdisjoint(on):
            if requests.fits_in(room):
                mine = int(node.name not in own)
                rank = (0, mine if own_first else 0, 0, 0.0, 0, mine, node.name)
                if best is None or rank < best[0]:
                    best = (rank, [])
            continue
        taken: dict[str, int] = {}
        removed: list[tuple[str, str]] = []
        cost = 0.0
        fresh = 0
        cuts = 0
        # Only jobs that may give a worker up at all (`_may_give`: no error, not the one that
        # gains, of no higher priority); `on` does not change here: removals are only planned.
        on_node = [(k, states[k]) for k in sorted(on) if k in givers]
        while not requests.fits_in(room):
            options = []
            for job_key, s in on_node:
                gone = taken.get(job_key, 0)
                left = (counts[job_key] if counts is not None else s.count) - gone
                here = on[job_key] - gone
                if here <= 0:
                    continue
                floor = s.floor()
                if left <= (floor if requests_held else s.job.min_replicas):
                    continue
                cut = int(left <= floor)
                if cut and fair and s.fairness is not None and s.fairness >= 1.0:
                    continue
                spans = len(packing.workers.get(job_key, ()))
                value = s.value(left, spans, spans - (here == 1))
                if cost + value >= cost_limit:
                    continue
                new_donor = int(consolidate and not (gone or s.gave))
                ahead = s.fairness if cut and fair and s.fairness is not None else 1.0
                options.append((new_donor if consolidate else cut, ahead, value, job_key))
            if not options:
                break
            first, _, value, job_key = min(options)
            fresh += first if consolidate else 0
            cuts += 0 if consolidate else first
            taken[job_key] = taken.get(job_key, 0) + 1
            removed.append((job_key, node.name))
            cost += value
            room = room + states[job_key].job.worker
        if requests.fits_in(room):
            mine = int(node.name not in own)
            rank = (cuts, mine if own_first else 0, fresh, cost, len(removed), mine, node.name)
            if best is None or rank < best[0]:
                best = (rank, removed)
    return (best[0][-1], best[1]) if best is not None else None


def _any_cheaper(
    packing: Packing,
    states: Mapping[str, _State],
    givers: set[str],
    counts: Mapping[str, int] | None,
    cost_limit: float,
) -> bool:
    """Whether any giver's first worker taken could cost less than ``cost_limit``.

    `_make_room` takes a first worker on a node only if it costs less than the limit, and
    it may cost (:meth:`_State.value`) either of two values: the worker was alone on its node
    or not. If neither is below the limit for any giver, no node gives anything.
    """
    return any(
        _first_cost(states[k], packing, counts[k] if counts is not None else None) < cost_limit
        for k in givers
    )


def _may_give(
    s: _State,
    job_key: str,
    exclude: str | None,
    priority: int,
    counts: Mapping[str, int] | None,
    requests_held: bool,
    fair: bool,
) -> bool:
    """Whether `_make_room` may take a worker of ``s`` before it took any (on any node)."""
    if s.error is not None or job_key == exclude or s.job.priority > priority:
        return False
    left = counts[job_key] if counts is not None else s.count
    floor = s.floor()
    if left <= (floor if requests_held else s.job.min_replicas):
        return False
    return not (left <= floor and fair and s.fairness is not None and s.fairness >= 1.0)


def _keep_granted(
    packing: Packing, valid: list[_State], policy: SizingPolicy, kueue: _Queues
) -> None:
    """Created-but-unbound workers keep their place.

    They keep it while they fit, or while the room they were granted by taking another
    job's worker is still worth taking (the donor's HPA may not have scaled it down yet);
    one that Kueue has not admitted, only while its ClusterQueue has room for it.
    """
    for s in sorted(valid, key=lambda s: (-s.job.priority, s.job.arrival, s.job.key)):
        if s.waiting or s.shrunk_for:
            continue
        job = s.job
        while s.count < min(job.replicas, job.max_replicas):
            if kueue.refusing(s) is not None:
                s.reason = Reason.QUEUE_QUOTA
                break
            node = packing.first_fit(job.worker, job.tolerations, job.node_selector)
            if node is None and not s.gave:
                node = _displace(packing, valid, s, policy)
            if node is None:
                s.reason = Reason.NO_CAPACITY
                break
            packing.place(node, job.worker, job.key)
            s.count += 1
            kueue.placed(s)
            s.granted += 1
    for s in valid:
        s.took.clear()  # kept workers are no growth of this round: nothing to undo


def _displace(
    packing: Packing,
    valid: list[_State],
    s: _State,
    policy: SizingPolicy,
    reserve: _Reserve | None = None,
    cheapest: _CheapestDonors | None = None,
) -> str | None:
    """Room for one more worker of ``s`` taken from other jobs' extra workers worth less.

    A donor is a job of no higher priority that neither grows this round nor gives room to
    protected demand or a waiting minimum, above its minimum; what it loses must be worth
    less than ``1 / rescale_margin`` of the worker gained. A donor already giving workers up
    this round is preferred (it rescales anyway). Returns the node (its room is freed).
    When the worker would eat into the arrivals' ``reserve``, free room is not used: the
    whole worker's room comes from donors. Called when no node has free room for the
    worker (its first fit found none) or free room is not used.
    """
    limit = s.growth_value(policy, packing) / max(1.0, policy.rescale_margin)
    job = s.job
    beyond_request = s.count + 1 > max(job.requested, job.min_replicas)
    if cheapest is not None and not cheapest.below(s, limit, beyond_request):
        return None  # as `_make_room` would find (`_any_cheaper`), without a pass over the jobs
    donors = {o.job.key: o for o in valid if o is not s and _may_donate(o, policy)}
    found = _make_room(
        packing, donors, job.worker, job, job.priority, job.key,
        cost_limit=limit, consolidate=True, requests_held=beyond_request,
        ignore_free=reserve is not None and not reserve.admits(job.worker), full=True,
    )  # fmt: skip
    if found is None:
        return None
    node, removals = found
    for donor_key, on in removals:
        o = donors[donor_key]
        packing.release(on, o.job.worker, donor_key)
        o.count -= 1
        o.gave.append((job.key, s.model.marginal(s.count), o.model.marginal(o.count)))
        s.took.append((o, on))
    return node


def _may_donate(o: _State, policy: SizingPolicy) -> bool:
    """Whether growth's displacement may take a worker of ``o`` at all (see `_displace`)."""
    return not (o.grown or o.granted or o.waiting or o.shrunk_for or o.over_budget(policy))


def _first_cost(o: _State, packing: Packing, left: int | None = None) -> float:
    """The least a first worker taken from ``o`` can cost: alone on its node or not.

    At ``left`` workers (default: its count now).
    """
    n = o.count if left is None else left
    spans = len(packing.workers.get(o.job.key, ()))
    return min(o.value(n, spans, spans), o.value(n, spans, spans - 1))


class _CheapestDonors:
    """The two jobs whose first worker displacement could take costs least, during growth.

    `_displace` fails when no donor's first worker costs less than its limit (`_any_cheaper`),
    and at 5,000 nodes / 1,000 jobs hundreds of displacements a round fail so, each after a
    pass over every job. Donors only leave during growth (a job that grows is no donor) and
    their costs change only when one gives a worker up; so the two cheapest are found once
    (of the jobs above their minimums, and of those above their floors: what a grower beyond
    its request may take) and again only after such a change, and a displacement asks them
    first.
    """

    def __init__(self, valid: Sequence[_State], policy: SizingPolicy, packing: Packing) -> None:
        self._valid = valid
        self._policy = policy
        self._packing = packing
        self._two: dict[bool, list[tuple[float, str]]] = {}

    def below(self, s: _State, limit: float, requests_held: bool) -> bool:
        """Whether a job other than ``s`` that may donate could give a worker below ``limit``.

        Of the jobs above their floors with ``requests_held``, else above their minimums.
        """
        two = self._two.get(requests_held)
        if two is None:
            costs = (
                (_first_cost(o, self._packing), o.job.key)
                for o in self._valid
                if o.count > (o.floor() if requests_held else o.job.min_replicas)
                and _may_donate(o, self._policy)
            )
            two = self._two[requests_held] = heapq.nsmallest(2, costs)
        return any(cost < limit for cost, key in two if key != s.job.key)

    def grew(self, s: _State) -> None:
        """``s`` grew this round: it donates no more."""
        if any(key == s.job.key for two in self._two.values() for _, key in two):
            self._two = {}

    def gave(self) -> None:
        """Donors gave workers up: their costs changed."""
        self._two = {}


class _Quotas:
    """What the namespaces' quotas admit, consumed by the round's new worker pods."""

    def __init__(self, quotas: Sequence[Quota]) -> None:
        self.by_namespace: dict[str, list[Quota]] = {}
        for q in sorted(quotas, key=lambda q: (q.namespace, q.name)):
            self.by_namespace.setdefault(q.namespace, []).append(q)

    def refusing(self, s: _State) -> str | None:
        """The quota that would refuse one more new worker pod of ``s`` (None: none)."""
        if s.count + 1 <= s.job.replicas:
            return None  # the pod exists already: the quota counted it
        for q in self.by_namespace.get(s.job.namespace, ()):
            if not q.admits(s.job.worker):
                return q.name
        return None

    def placed(self, s: _State) -> None:
        """A worker was planned for ``s`` (a new pod once beyond its replicas)."""
        if s.count <= s.job.replicas:
            return
        ns = s.job.namespace
        if ns in self.by_namespace:
            self.by_namespace[ns] = [q.take(s.job.worker) for q in self.by_namespace[ns]]

    def released(self, s: _State) -> None:
        """A planned worker of ``s`` was given back (before ``s.count`` drops)."""
        if s.count <= s.job.replicas:
            return
        ns = s.job.namespace
        if ns in self.by_namespace:
            back = Resources(-s.job.worker.cpu, -s.job.worker.memory, -s.job.worker.gpu)
            self.by_namespace[ns] = [
                Quota(q.namespace, q.name, {**q.take(back).left, **_pods_back(q)})
                for q in self.by_namespace[ns]
            ]


def _pods_back(q: Quota) -> dict[str, float]:
    return {"pods": q.left["pods"] + 1.0} if "pods" in q.left else {}


class _Queues:
    """What the Kueue ClusterQueues admit, consumed by the round's unadmitted workers.

    A worker Kueue admitted is in its queue's usage already; only those beyond take room.
    """

    def __init__(self, queues: Sequence[QueueQuota]) -> None:
        self.by_name = {q.name: q for q in queues}
        self.given_up: dict[str, int] = {}
        """Job key -> its admitted workers left after it gave some up to queue demand."""

    def admitted(self, s: _State) -> int:
        """Its workers Kueue admitted that it keeps this round."""
        return min(s.job.admitted, self.given_up.get(s.job.key, s.job.admitted))

    def give_up(self, s: _State) -> None:
        """An admitted worker of ``s`` goes (``s.count`` dropped already): its room is back."""
        name = s.job.queue
        if name is not None and name in self.by_name:
            self.by_name[name] = self.by_name[name].returned(s.job.worker)
        self.given_up[s.job.key] = min(self.admitted(s), s.count)

    def refusing(self, s: _State) -> str | None:
        """The ClusterQueue that would leave one more worker of ``s`` waiting (None: none)."""
        name = s.job.queue
        if name is None or s.count + 1 <= self.admitted(s):
            return None
        queue = self.by_name.get(name)
        if queue is None or not queue.admits(s.job.worker):
            s.queue = name
            return name
        return None

    def placed(self, s: _State) -> None:
        """A worker was planned for ``s`` (beyond its admitted ones: it takes queue room)."""
        name = s.job.queue
        if name is None or s.count <= self.admitted(s) or name not in self.by_name:
            return
        picks = self.by_name[name].choose(s.job.worker)
        if picks is not None:
            self.by_name[name] = self.by_name[name].moved(s.job.worker, picks, 1.0)
            s.picks.append(picks)

    def hold(self, valid: Sequence[_State]) -> None:
        """Workers planned before the queues are read (a job's minimum) take their room.

        The minimum is served whatever the queue admits (it waits as one), but those of
        its workers Kueue has not admitted wait for the same room as growth: counted in
        neither usage nor planned room, they would be planned a second time.
        """
        for s in sorted(valid, key=lambda s: (-s.job.priority, s.job.arrival, s.job.key)):
            name = s.job.queue
            if name is None or name not in self.by_name:
                continue
            for _ in range(s.count - self.admitted(s) - len(s.picks)):
                picks = self.by_name[name].choose(s.job.worker)
                if picks is None:
                    break
                self.by_name[name] = self.by_name[name].moved(s.job.worker, picks, 1.0)
                s.picks.append(picks)

    def released(self, s: _State) -> None:
        """A planned worker of ``s`` was given back (before ``s.count`` drops)."""
        name = s.job.queue
        if name is None or s.count <= self.admitted(s) or not s.picks or name not in self.by_name:
            return
        self.by_name[name] = self.by_name[name].moved(s.job.worker, s.picks.pop(), -1.0)


def _queue_demands(pods: Sequence[Pod], waiting: Sequence[QueueDemand]) -> list[QueueDemand]:
    """Every workload waiting in a queue: pods held by Kueue's gate, and those without one."""
    gated = [
        QueueDemand(p.key, p.queue, p.priority, p.requests)
        for p in pods
        if p.queue is not None and p.node is None and p.job is None
    ]
    return [*gated, *waiting]


def _serve_queue_demand(
    packing: Packing, valid: list[_State], demands: Sequence[QueueDemand], kueue: _Queues
) -> None:
    """Workloads waiting in a Kueue ClusterQueue get its room before jobs grow.

    Those of at least the lowest priority of the queue's jobs (as protected demand: Kueue
    admits the highest priority first), highest first; one the queue cannot admit takes
    admitted workers of the queue's jobs of lower priority, above their minimum (most
    workers above it first): they shrink (``protected_demand``) and Kueue admits it in
    their place. One the jobs cannot make room for takes nothing (it waits; they keep
    their workers).
    """
    lowest: dict[str, int] = {}
    for s in valid:
        if s.job.queue is not None:
            lowest[s.job.queue] = min(lowest.get(s.job.queue, s.job.priority), s.job.priority)
    ordered = sorted(
        (d for d in demands if d.queue in lowest and d.priority >= lowest[d.queue]),
        key=lambda d: (-d.priority, d.key),
    )
    for demand in ordered:
        queue = kueue.by_name.get(demand.queue)
        if queue is None:
            continue
        if not queue.admits(demand.requests, demand.pods):
            donors = sorted(
                (
                    s
                    for s in valid
                    if s.job.queue == demand.queue and s.job.priority < demand.priority
                ),
                key=lambda s: (-(s.count - s.job.min_replicas), s.job.key),
            )
            if not _shrink_for(demand, donors, packing, kueue):
                continue
            queue = kueue.by_name[demand.queue]
        picks = queue.choose(demand.requests, demand.pods)
        assert picks is not None
        kueue.by_name[demand.queue] = queue.moved(demand.requests, picks, 1.0, demand.pods)


def _shrink_for(
    demand: QueueDemand, donors: list[_State], packing: Packing, kueue: _Queues
) -> bool:
    """Admitted workers of ``donors`` go until their queue admits ``demand``.

    All that it takes, or none (False: the round is as before).
    """
    if not any(_gives_queue_room(s, packing, kueue) for s in donors):
        return False
    saved = (packing.savepoint(), dict(kueue.by_name), dict(kueue.given_up))
    taken: list[_State] = []
    while not kueue.by_name[demand.queue].admits(demand.requests, demand.pods):
        donor = next((s for s in donors if _gives_queue_room(s, packing, kueue)), None)
        if donor is None:  # it waits whatever the jobs give: they give nothing
            packing.rollback(saved[0])
            kueue.by_name, kueue.given_up = saved[1], saved[2]
            for s in taken:
                s.count += 1
            return False
        placed = packing.workers[donor.job.key]
        node = min((n for n, c in placed.items() if c > 0), key=lambda n: (placed[n], n))
        packing.release(node, donor.job.worker, donor.job.key)
        donor.count -= 1
        kueue.give_up(donor)
        taken.append(donor)
    packing.commit(saved[0])
    for s in taken:
        s.shrunk_for.append((demand.key, demand.priority))
    return True


def _gives_queue_room(s: _State, packing: Packing, kueue: _Queues) -> bool:
    """Whether ``s`` can give up an admitted worker placed on a node, above its minimum."""
    placed = packing.workers.get(s.job.key, {})
    return s.job.min_replicas < s.count <= kueue.admitted(s) and any(c > 0 for c in placed.values())


def _repack(packing: Packing, valid: list[_State], policy: SizingPolicy) -> None:
    """A job whose placement trains slower than fewer workers would shrinks to them.

    A job spread over more nodes than it needs can train slower than fewer workers on fewer
    nodes (bert: two workers across two nodes 9.1 samples/s, one worker 10.5). Which workers
    a shrink removes is the ReplicaSet's choice (the newest first; Kubernetes also removes
    workers from the nodes that hold most of them first), so a size is judged by the worst
    placement its remaining workers can have: m workers on as many of the job's nodes as
    they can span. The job shrinks to the size whose worst case is predicted fastest, when
    that beats where it is by the hysteresis share and pays back two rescales' pauses (the
    shrink and a growth back); its freed room goes to growth, its own (node-local) first.
    Only a placement measured slow (the job's or its class's) is left so.
    """
    for s in sorted(valid, key=lambda s: s.job.key):
        job = s.job
        placed = packing.workers.get(job.key, {})
        spans = len(placed)
        if (
            spans < 2
            or s.count != job.replicas
            or s.waiting or s.shrunk_for or s.granted or s.reclaimed or s.gave or s.returned
            or s.over_budget(policy)
        ):  # fmt: skip
            continue
        if not s.model.measured(s.count, spans):
            continue  # judged on a measurement of where it is, not on a guess
        now = s.model.placed_speedup(s.count, spans)
        best, size = now, s.count
        for m in range(max(1, job.min_replicas), s.count):
            # A shrink leaves it on at most the nodes it spans; where its nodes hold more
            # workers than the model packs on one (their room is not all the model sees),
            # that is fewer nodes than the model packs ``m`` on.
            most = min(m, spans)
            worst = min(
                s.model.placed_speedup(m, k)
                for k in range(min(s.model.packed_nodes(m), most), most + 1)
            )
            if worst > best + 1e-12:
                best, size = worst, m
        pause = 2.0 * job.rescale_pause_s
        if (
            size == s.count
            or best < now * (1.0 + policy.hysteresis)
            or (pause > 0 and (best - now) * max(0.0, policy.payback_s - pause) <= now * pause)
        ):
            continue
        while s.count > size:  # from its nodes with the fewest of its workers
            node = min(placed, key=lambda n: (placed[n], n))
            packing.release(node, job.worker, job.key)
            s.count -= 1
        s.repacked = (size, best, now, spans)
        s.reason = Reason.PLACEMENT


def _grow(
    packing: Packing,
    valid: list[_State],
    policy: SizingPolicy,
    now: float,
    quotas: _Quotas,
    reserve: _Reserve | None = None,
    kueue: _Queues | None = None,
) -> None:
    kueue = kueue or _Queues(())
    for s in valid:
        s.start = s.count
        s.start_nodes = frozenset(packing.workers.get(s.job.key, ()))
    excluded: set[str] = {
        s.job.key
        for s in valid
        if s.waiting
        or s.shrunk_for
        or s.repacked
        or s.reason in (Reason.NO_CAPACITY, Reason.QUEUE_QUOTA)
    }
    reserve = reserve or _Reserve(packing, Resources())
    for _ in range(len(valid) + 1):
        growing = [s for s in valid if s.job.key not in excluded]
        _grow_greedily(packing, growing, policy, now, valid, quotas, reserve, kueue)
        unpaid = []
        trimmed = False
        for s in valid:
            if not s.grown:
                continue
            end = _best_end(s, s.start, policy)
            if end == s.count:
                continue
            if end == s.start or s.took:
                unpaid.append(s)
                continue
            while s.count > end:  # stop at the fastest size: give back what lies beyond
                reserve.freed(s.job.worker)
                packing.release(s.grown.pop(), s.job.worker, s.job.key)
                quotas.released(s)
                kueue.released(s)
                s.count -= 1
            excluded.add(s.job.key)
            trimmed = True
        if not unpaid and not trimmed:
            return
        for s in unpaid:
            for node in reversed(s.grown):
                reserve.freed(s.job.worker)
                packing.release(node, s.job.worker, s.job.key)
                quotas.released(s)
                kueue.released(s)
                s.count -= 1
            for donor, node in s.took:
                reserve.taken(donor.job.worker)
                packing.place(node, donor.job.worker, donor.job.key)
                donor.count += 1
                donor.gave = [g for g in donor.gave if g[0] != s.job.key]
            s.count, s.grown, s.room_before, s.took = s.start, [], {}, []
            s.reason = Reason.LOW_MARGINAL_GAIN
            excluded.add(s.job.key)
        for s in valid:
            if s.job.key not in excluded:
                s.reason = None


class _Reserve:
    """The free room growth beyond requests leaves for arrivals (``arrival_reserve``)."""

    def __init__(self, packing: Packing, room: Resources, shape: Resources | None = None) -> None:
        self.free = sum((r.clamped() for r in packing.free.values()), Resources())
        self.room = room
        self.shape = shape or room
        """One worker of the size the reserve is counted in."""

    def admits(self, worker: Resources) -> bool:
        """Whether one more worker of this size leaves the reserve free."""
        return self.room.is_zero or (self.room + worker).fits_in(self.free)

    @property
    def short(self) -> bool:
        """Whether less than the reserve is free."""
        return not self.room.is_zero and not self.room.fits_in(self.free)

    def taken(self, worker: Resources) -> None:
        self.free = self.free - worker

    def freed(self, worker: Resources) -> None:
        self.free = self.free + worker


def _reserve_room(
    valid: list[_State], nodes: Iterable[Resources], policy: SizingPolicy, now: float
) -> tuple[Resources, Resources]:
    """The arrivals' reserve and the worker size it is counted in.

    ``arrival_reserve`` of the cluster in whole workers of the jobs' most common size, but
    no more than the jobs that arrived within ``arrival_window_s`` requested: the next
    window is expected to bring as much. When jobs stop arriving (a night, the end of a
    batch), nothing is held back from the jobs that run.
    """
    counts: dict[Resources, int] = {}
    for s in valid:
        counts[s.job.worker] = counts.get(s.job.worker, 0) + 1
    if not counts or policy.arrival_reserve <= 0:
        return Resources(), Resources()
    room = list(nodes)
    total = sum(room, Resources())
    shape = min(counts, key=lambda w: (-counts[w], w.dominant_share(total), w.cpu, w.memory))
    keep = math.floor(policy.arrival_reserve * sum(_fits(shape, r) for r in room) + 1e-9)
    recent = sum(
        max(1, min(s.job.requested, s.job.max_replicas))
        for s in valid
        if s.job.worker == shape and now - s.job.arrival < policy.arrival_window_s
    )
    return shape.scaled(min(keep, recent)), shape


def _keep_reserve(
    packing: Packing, valid: list[_State], policy: SizingPolicy, reserve: _Reserve
) -> None:
    """Less than the reserve free: extras beyond requests give room back, worth least first.

    An arrival takes the reserve at once; the room it took comes back from the workers that
    grew beyond their jobs' requests, so the next arrival starts at once too. A job that
    takes the reserve costs one donor one rescale, as its own minimum's claim would, but it
    does not wait for it. The lowest-value extra goes first; of equal ones, the one where
    most room is free already (an arrival of several workers then fits on one node). Never
    below a request; not a job whose growth is in flight.

    A job over its rescale budget gives last, but it gives: the reserve is the arrivals'
    claims made ahead of time, and a claim is not held by the budget (an arrival that finds
    no room takes an extra from such a job anyway, a round and an HPA sync later). Left out,
    a cluster whose extras all sat with jobs over budget kept no reserve at all (dev
    workload 15 at twice the arrival rate: 64 of 64 GPUs planned for 800 s of a burst while
    the extras of three jobs over budget, 20 GPUs, stayed; 13 arrivals there each started
    2 to 15 s later than under static sizing). Over its budget it gives only workers beyond
    its request, even where a smaller size was measured as fast (its floor is then below its
    request): growth back to the request is not held by the budget, so a worker taken below
    it came straight back, and the next refill took it again (a mix of the dev set's jobs at
    twice the arrival rate: an imagenet job that asked for 16, a measured dip, rescaled 198
    times, and the mix 4.0 times per job, from 2.2).
    """
    shape = reserve.shape
    while reserve.short:
        options = []
        for s in valid:
            placed = packing.workers.get(s.job.key, {})
            spent = int(s.over_budget(policy))
            keep = max(s.floor(), min(s.job.requested, s.job.max_replicas) if spent else 0)
            if (
                not placed or s.count <= keep
                or s.waiting or s.shrunk_for or s.granted or s.reclaimed or s.repacked
            ):  # fmt: skip
                continue
            spans = len(placed)
            for node, here in placed.items():
                value = s.value(s.count, spans, spans - (here == 1))
                free = _fits(shape, packing.free[node])
                options.append((spent, round(value, 9), -free, s.job.key, node, s))
        if not options:
            return
        *_, node, s = min(options, key=lambda o: o[:5])
        packing.release(node, s.job.worker, s.job.key)
        reserve.freed(s.job.worker)
        s.count -= 1
        s.returned.append(RESERVE)


RESERVE = "arrivals (the reserve)"
"""What a job gave its workers beyond its request back to when it refilled the reserve."""


def _grow_greedily(
    packing: Packing,
    candidates: list[_State],
    policy: SizingPolicy,
    now: float,
    valid: list[_State],
    quotas: _Quotas,
    reserve: _Reserve,
    kueue: _Queues,
) -> None:
    """One worker at a time to the best job, until no job can grow.

    A job's score is what its next worker is worth on the placement growth would reach (and,
    by the rescale margin, whether it already grows this round). Room only shrinks during
    growth, so a score can only fall: a job whose score fell since it was queued is queued
    again with its new score (lazy greedy); a job that is blocked or does not fit stays out.
    """
    margin = max(1.0, policy.rescale_margin)
    rooms: dict[Resources, tuple[int, ...]] = {}
    for s in candidates:
        w = s.job.worker
        if w not in rooms:
            counts = (_fits(w, free) for free in packing.free.values())
            rooms[w] = tuple(heapq.nlargest(_SPILL_NODES, (c for c in counts if c > 0)))
        s.spill_room, s.memo = rooms[w], {}

    def score(s: _State) -> float:
        return s.growth_value(policy, packing) * (margin if s.grown else 1.0)

    def entry(s: _State, value: float) -> tuple[tuple[float, int, float, str], _State]:
        return (-value, -s.job.priority, s.job.arrival, s.job.key), s

    heap = [entry(s, score(s)) for s in candidates]
    heapq.heapify(heap)
    cheapest = _CheapestDonors(valid, policy, packing)
    while heap:
        (queued, *_), s = heapq.heappop(heap)
        if s.gave or s.returned:
            s.reason = Reason.LOW_MARGINAL_GAIN  # its workers are worth more elsewhere
            continue
        fresh = score(s)
        if fresh < -queued - 1e-9 and heap and -fresh > heap[0][0][0]:
            heapq.heappush(heap, entry(s, fresh))
            continue
        blocked = _growth_block(s, policy, now, packing)
        if blocked is None and (refusing := quotas.refusing(s)) is not None:
            s.quota, blocked = refusing, Reason.NO_CAPACITY
        if blocked is None and kueue.refusing(s) is not None:
            blocked = Reason.QUEUE_QUOTA
        node = None
        if blocked is None:
            beyond = s.count + 1 > max(s.job.requested, s.job.min_replicas)
            if not beyond or reserve.admits(s.job.worker):
                node = packing.local_fit(
                    s.job.key, s.job.worker, s.job.tolerations, s.job.node_selector
                )
            if node is not None:
                s.room_before.setdefault(node, packing.free[node])
                reserve.taken(s.job.worker)
            else:
                node = _displace(packing, valid, s, policy, reserve, cheapest)
                if node is not None:
                    cheapest.gave()
        if node is None:
            s.reason = blocked or Reason.NO_CAPACITY
            continue
        cheapest.grew(s)
        packing.place(node, s.job.worker, s.job.key)
        s.count += 1
        quotas.placed(s)
        kueue.placed(s)
        s.grown.append(node)
        heapq.heappush(heap, entry(s, score(s)))


def _growth_block(
    s: _State, policy: SizingPolicy, now: float, packing: Packing | None = None
) -> Reason | None:
    job = s.job
    if s.count >= job.max_replicas:
        return Reason.AT_MAX
    limit = s.growth_limit(policy)
    if s.count + 1 > limit:
        return Reason.HOLD_OFF
    if _ahead(s, limit, packing) < job.min_marginal_speedup:
        return Reason.LOW_MARGINAL_GAIN
    if (
        not s.grown
        and job.last_rescale is not None
        and now - job.last_rescale < policy.hold_off_s
        and not _known_newcomer(s, policy, now)
    ):
        return Reason.HOLD_OFF
    if s.over_budget(policy) and s.count + 1 > job.requested:
        return Reason.HOLD_OFF  # over budget it only grows back to its request
    return None


def _known_newcomer(s: _State, policy: SizingPolicy, now: float) -> bool:
    """A new job of a measured class (or measured itself): its first growth is not held off.

    It was created within the hold-off.

    The hold-off waits for a measurement of the size a job grew to before it grows again. A
    new job of a class measured before has nothing to wait for: its class's sizes say what
    it will train at. Held off, a job of a minute or two (much of a Philly-like mix) grew only
    when it was nearly done, and one that had waited for room finished later than static
    sizing would have finished it.
    """
    job = s.job
    return now - job.arrival < policy.hold_off_s and bool(s.model.points)


def _ahead(s: _State, limit: int, packing: Packing | None) -> float:
    """The best mean speed-up per added worker up to ``limit``, on growth's placements.

    Growth reaches the room on the job's nodes first, then new nodes.
    """
    if packing is None:
        return s.model.ahead(s.count, limit)[0]
    local = s.local_room(packing)
    key = (s.count, s.nodes_now(packing), local, limit, -1)  # as growth_value's memo
    best = s.memo.get(key)
    if best is None:
        here = s.speed_now(packing)
        gains = ((s.speed_if(packing, m, local) - here) / (m - s.count)
                 for m in range(s.count + 1, limit + 1))  # fmt: skip
        best = s.memo[key] = max(gains, default=0.0)
    return best


def _pays_back(s: _State, start: int, policy: SizingPolicy, end: int | None = None) -> bool:
    """Whether growing from ``start`` to ``end`` (default: the planned size) is worth a rescale.

    The predicted speed (on the nodes planned) must rise by the hysteresis share, and the
    samples gained within the pay-back time must make up for the measured pause.
    """
    end = s.count if end is None else end
    if start <= 0:
        return True
    before, after = s.planned_speed(start), s.planned_speed(end)
    if after < before * (1.0 + policy.hysteresis):
        return False
    pause = s.job.rescale_pause_s
    if pause <= 0:
        return True
    return (after - before) * max(0.0, policy.payback_s - pause) > before * pause


def _best_end(s: _State, start: int, policy: SizingPolicy) -> int:
    """Where the round's growth should end: the fastest predicted size worth its rescale.

    Between ``start`` and the planned size, on the nodes planned; ``start`` when none is
    worth it.
    """
    best = start
    for n in range(start + 1, s.count + 1):
        if s.planned_speed(n) > s.planned_speed(best) + 1e-12 and _pays_back(s, start, policy, n):
            best = n
    return best


def _decision(s: _State, placed: Mapping[str, int]) -> JobDecision:
    job = s.job
    if s.error is not None:
        desired, reason = job.replicas, Reason.FALLBACK
        message = f"stays at {desired}: {s.error} (serving the current replica count)"
    elif s.waiting:
        desired, reason = job.min_replicas, Reason.WAITING
        message = (
            f"waiting: its minimum of {job.min_replicas} workers "
            f"({job.worker.describe()} each) does not fit"
        )
    else:
        desired = max(job.min_replicas, min(job.max_replicas, s.count))
        reason = s.reason or Reason.NO_CAPACITY
        if s.shrunk_for:
            reason = Reason.PROTECTED_DEMAND
        elif s.returned:
            reason = Reason.FAIRNESS
        elif s.gave:
            reason = Reason.LOW_MARGINAL_GAIN
        message = _message(s, desired, reason)
    marginal = s.model.marginal(desired) if desired < job.max_replicas else 0.0
    nodes = dict(sorted((n, c) for n, c in placed.items() if c > 0))
    return JobDecision(
        job.key, job.replicas, desired, reason, message, marginal,
        job.min_replicas, job.max_replicas, s.curve, nodes,
    )  # fmt: skip


def _limiting_part(room: Resources, worker: Resources) -> Resources:
    """Only the resource that limits how many workers fit in ``room`` (for the message)."""
    if worker.gpu > 0:
        return Resources(gpu=room.gpu)
    cpu_first = worker.memory <= 0 or room.cpu * worker.memory <= room.memory * worker.cpu
    if worker.cpu > 0 and cpu_first:
        return Resources(cpu=room.cpu)
    return Resources(memory=room.memory)


def _message(s: _State, desired: int, reason: Reason) -> str:
    job = s.job
    if s.shrunk_for:
        claims = sorted(set(s.shrunk_for))
        who = ", ".join(f"{key} (priority {p})" for key, p in claims[:3])
        more = f" and {len(claims) - 3} more" if len(claims) > 3 else ""
        return (
            f"shrank to {desired}: made room for {who}{more}; the job's priority is {job.priority}"
        )
    if s.repacked is not None:
        size, there, here, spans = s.repacked
        return (
            f"shrank to {desired}: {size} workers on fewer nodes are predicted "
            f"{there / max(here, 1e-12):.2f}x as fast as {job.replicas} across {spans} nodes"
        )
    if s.returned:
        takers = sorted(set(s.returned))
        more = f" and {len(takers) - 3} more" if len(takers) > 3 else ""
        return (
            f"shrank to {desired}: its workers beyond its request of {job.requested} went back "
            f"to {', '.join(takers[:3])}{more} (below their requests)"
        )
    if s.gave:
        takers = sorted({key for key, _, _ in s.gave})
        there = max(m for _, m, _ in s.gave)
        here = min(m for _, _, m in s.gave)
        more = f" and {len(takers) - 3} more" if len(takers) > 3 else ""
        return (
            f"shrank to {desired}: its workers are worth more to {', '.join(takers[:3])}{more} "
            f"(marginal speed-up {there:.2f} there, {here:.2f} here)"
        )
    if s.reclaimed and not s.grown:
        return f"grew to {desired}: back to its request of {job.requested}"
    if s.grown:
        step = f" (+{len(s.grown)})" if len(s.grown) > 1 else ""
        parts = []
        if s.room_before:
            node = min(s.room_before)
            room = _limiting_part(s.room_before[node].clamped(), job.worker)
            others = len(s.room_before) - 1
            more = f" and {others} more node{'s' if others > 1 else ''}" if others else ""
            parts.append(f"{room.describe()} free on {node}{more}")
        if s.took:
            donors = sorted({d.job.key for d, _ in s.took})
            worth = max(d.model.marginal(d.count) for d, _ in s.took)
            n = len(s.took)
            parts.append(
                f"the room of {n} worker{'s' if n > 1 else ''} of {', '.join(donors[:3])}"
                f"{' and more' if len(donors) > 3 else ''} (marginal speed-up {worth:.2f} there)"
            )
        return (
            f"grew to {desired}{step}: {' and '.join(parts)}, "
            f"marginal speed-up {s.model.marginal(desired - 1):.2f}"
        )
    verb = "shrank to" if desired < job.replicas else "stays at"
    why = {
        Reason.AT_MAX: f"at its maximum of {job.max_replicas} workers",
        Reason.NO_CAPACITY: (
            f"the namespace's ResourceQuota {s.quota} admits no more workers "
            f"({job.worker.describe()} each)"
            if s.quota is not None
            else f"no node has room for one more worker ({job.worker.describe()})"
        ),
        Reason.LOW_MARGINAL_GAIN: (
            f"one more worker would add {s.model.marginal(desired):.2f} "
            f"(threshold {job.min_marginal_speedup:.2f}) or not pay back its rescale pause"
        ),
        Reason.HOLD_OFF: "held off: grew recently, or the new size is not measured yet",
        Reason.QUEUE_QUOTA: (
            f"the Kueue ClusterQueue {s.queue} admits no more workers "
            f"({job.worker.describe()} each)"
        ),
    }
    return f"{verb} {desired}: {why.get(reason, reason.value)}"
