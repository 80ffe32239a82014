"""What the sizer sees of a cluster: nodes, pods and elastic jobs, as plain values.

A capacity source (:mod:`edl_sizing.capacity`) builds these from Kubernetes
objects, a static file or a simulator; the decision (:mod:`edl_sizing.decision`)
reads nothing else. Times are seconds on the caller's clock (the same clock as ``now``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edl_sizing.resources import Resources

_HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint; only ``NoSchedule`` and ``NoExecute`` keep pods off the node."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration, matched as the scheduler does (``Equal`` or ``Exists``)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration lets a pod onto a node with ``taint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def tolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> bool:
    """Whether every hard taint of a node is tolerated."""
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in taints
        if taint.effect in _HARD_EFFECTS
    )


@dataclass(frozen=True, slots=True)
class Node:
    """A node: what it can hold and whether new pods may land on it."""

    name: str
    allocatable: Resources
    ready: bool = True
    """The node's Ready condition is True."""
    schedulable: bool = True
    """Not cordoned (``spec.unschedulable`` unset)."""
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def accepts(
        self, tolerations: tuple[Toleration, ...], node_selector: Mapping[str, str]
    ) -> bool:
        """Whether a pod with these tolerations and node selector may be placed here."""
        if not (self.ready and self.schedulable):
            return False
        if any(self.labels.get(k) != v for k, v in node_selector.items()):
            return False
        return tolerated(self.taints, tolerations)


@dataclass(frozen=True, slots=True)
class Pod:
    """A non-terminal pod: what it requests and where it runs (``node`` None: Pending)."""

    namespace: str
    name: str
    requests: Resources
    priority: int = 0
    node: str | None = None
    """The node it is bound to; None while Pending (not yet scheduled)."""
    job: str | None = None
    """The key (``namespace/name``) of the job whose worker this is; None for other pods."""
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    queue: str | None = None
    """The Kueue ClusterQueue whose admission it waits for (its admission gate); None: it
    waits in no queue."""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Job:
    """An elastic training job (a trainer Deployment) and what the sizer knows about it.

    ``observed`` maps a world size (workers) to the job's measured throughput at that size
    (samples per second, any consistent unit: only ratios matter). ``error`` set means the
    job's own description is bad (an annotation, its pod template): the sizer then keeps
    its current replicas and touches nothing of it.
    """

    namespace: str
    name: str
    worker: Resources
    """Requests of one worker pod."""
    replicas: int = 0
    """Workers the job has now (the Deployment's ``spec.replicas``)."""
    min_replicas: int = 1
    max_replicas: int = 1
    weight: float = 1.0
    """Fairness weight: a job of weight 2 is worth twice the marginal speed-up."""
    min_marginal_speedup: float = 0.05
    """Grow only while one more worker adds at least this much throughput, relative to one
    worker's (the gain of worker n+1 is X(n+1) - X(n) over X(1))."""
    priority: int = 0
    """The value of the job's PriorityClass."""
    arrival: float = 0.0
    """When the job was created (orders waiting jobs of equal priority)."""
    last_rescale: float | None = None
    """When the job last gained a worker (growth hold-off); None: not known."""
    rescale_pause_s: float = 0.0
    """Measured mean pause of training at a rescale, seconds (0: not measured)."""
    observed: Mapping[int, float] = field(default_factory=dict)
    """World size -> samples/s measured where the placement is not known."""
    placed: Mapping[tuple[int, int], float] = field(default_factory=dict)
    """(workers, nodes they spanned) -> samples/s measured there: two workers on one node
    and two across two nodes are different measurements."""
    spread: float = 0.0
    """Relative spread of the job's repeated measurements: two measurements closer than
    that are not told apart (0: not known)."""
    progress: float | None = None
    """The share of its planned samples it has trained (``edl_job_progress_ratio``; None:
    not known)."""
    planned_samples: float = 0.0
    """Its planned samples (estimated from its throughput over its rate of progress; 0: not
    known). With ``progress`` it gives the job's finish-time fairness."""
    requested: int = 0
    """The size the job was created with (0: not known). Without a measurement it runs
    there, and another job's growth beyond that job's own request never shrinks it below it,
    unless a smaller size was measured at least as fast (protected demand still does, and so
    may a job still below its own request)."""
    recent_rescales: int = 0
    """Rescales of the job within the last hour (the caller counts them): at the policy's
    budget it grows no further than ``requested`` and gives no workers to another job's
    growth."""
    job_class: str | None = None
    """The ``edl.paddlepaddle.org/class`` label: jobs of one class share a size history (the
    decision does not read it; the caller merges the class's measurements into
    ``observed``)."""
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    queue: str | None = None
    """The Kueue ClusterQueue that admits its workers (through the LocalQueue its
    ``kueue.x-k8s.io/queue-name`` label names); None: Kueue does not queue it."""
    admitted: int = 0
    """Its workers Kueue has admitted (their admission gate is gone): only workers beyond
    these need room in ``queue``."""
    error: str | None = None

    @property
    def key(self) -> str:
        """``namespace/name``: how pods and decisions refer to the job."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Quota:
    """What a namespace's ResourceQuota still admits: ``left`` by resource.

    Keys are ``cpu``, ``memory``, ``gpu`` (requests) and ``pods``; a resource the quota does
    not limit is absent. A new worker pod is admitted only if it fits every quota of its
    namespace (the API server refuses it otherwise: ``FailedCreate`` on the ReplicaSet).
    """

    namespace: str
    name: str
    left: Mapping[str, float] = field(default_factory=dict)

    def admits(self, worker: Resources, pods: int = 1) -> bool:
        """Whether ``pods`` more pods of ``worker`` fit what is left."""
        need = {"cpu": worker.cpu, "memory": worker.memory, "gpu": worker.gpu}
        for key, have in self.left.items():
            want = pods if key == "pods" else need.get(key, 0.0) * pods
            if want > have + 1e-9 * max(1.0, abs(have)):
                return False
        return True

    def take(self, worker: Resources) -> Quota:
        """What is left after one more pod of ``worker``."""
        need = {"cpu": worker.cpu, "memory": worker.memory, "gpu": worker.gpu, "pods": 1.0}
        return Quota(
            self.namespace, self.name, {k: v - need.get(k, 0.0) for k, v in self.left.items()}
        )
