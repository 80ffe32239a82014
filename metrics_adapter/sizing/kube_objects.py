"""Kubernetes objects (as the API's JSON) to the sizer's values, and the cluster view.

Pure functions: a watch keeps compact records made here (only what the sizer reads, so
memory stays small on large clusters), and :func:`assemble` turns them into a
:class:`~edl_sizing.capacity.ClusterSnapshot`.

A **job** is a Deployment labelled ``edl.paddlepaddle.org/job: <name>``; its workers are
the pods its selector matches. A Deployment at 0 replicas is no job to size: the HPA does not
act on a target at 0, and it holds no room. That is where a finished job ends
(``edl-agent --on-finished scale-to-zero`` scales it to 0; its pods being deleted do not
count, so their room is free at once); the label ``edl.paddlepaddle.org/state: finished``,
which agents before issue 37 put on the Deployment, still means the same. Its annotations (all
optional):

=====================================  ========  ====================================
annotation                             default   meaning
=====================================  ========  ====================================
``edl.paddlepaddle.org/min-workers``   1         never fewer workers (a min that does
                                                 not fit waits)
``edl.paddlepaddle.org/max-workers``   16        never more workers
``edl.paddlepaddle.org/weight``        1         fairness weight (>= 0)
``edl.paddlepaddle.org/min-marginal-   0.05      grow only while one more worker adds
speedup``                                        this share of one worker's throughput
=====================================  ========  ====================================

A worker's requests come from the pod template (containers' requests, a limit standing in
for a missing request as the API server defaults it, the largest init container, the pod
overhead); the job's priority from the template's ``priorityClassName`` (or the global
default PriorityClass).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, TypedDict

import msgspec

from edl_common.quantity import QuantityError, parse_quantity
from edl_sizing.capacity import ClusterSnapshot
from edl_sizing.cluster import Job, Node, Pod, Quota, Taint, Toleration
from edl_sizing.queues import QueueQuota
from edl_sizing.resources import ResourceError, Resources
from metrics_adapter.kube.selectors import LabelSelector, Operator, Requirement
from metrics_adapter.kube.shared_values import SharedValues
from metrics_adapter.sizing.kueue_objects import (
    ADMISSION_GATE,
    MANAGED,
    QUEUE_LABEL,
    ClusterQueueRecord,
    QueueUsage,
    WaitingWorkload,
    queue_quotas,
    waiting_demands,
)

JOB_LABEL = "edl.paddlepaddle.org/job"
MIN_WORKERS = "edl.paddlepaddle.org/min-workers"
MAX_WORKERS = "edl.paddlepaddle.org/max-workers"
WEIGHT = "edl.paddlepaddle.org/weight"
MIN_MARGINAL_SPEEDUP = "edl.paddlepaddle.org/min-marginal-speedup"
REQUESTED_WORKERS = "edl.paddlepaddle.org/requested-workers"
CLASS_LABEL = "edl.paddlepaddle.org/class"
STATE_LABEL = "edl.paddlepaddle.org/state"
FINISHED = "finished"
_ANNOTATIONS = (MIN_WORKERS, MAX_WORKERS, WEIGHT, MIN_MARGINAL_SPEEDUP, REQUESTED_WORKERS)
_TERMINAL = ("Succeeded", "Failed")
_OPERATORS = {"In": Operator.IN, "NotIn": Operator.NOT_IN, "Exists": Operator.EXISTS}


@dataclass(frozen=True)
class JobDefaults:
    """Values for annotations a job leaves out."""

    min_workers: int = 1
    max_workers: int = 16
    weight: float = 1.0
    min_marginal_speedup: float = 0.05


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A non-terminal pod that is not being deleted, as the sizer keeps it."""

    pod: Pod
    labels: Mapping[str, str]
    created: float
    queued: bool = False
    """Kueue holds it back (its admission gate): its Workload is not admitted yet."""
    releasing: bool = False
    """Being deleted while Kueue's finalizer holds it: it counts for nothing (its Workload's
    quota is on its way back)."""


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    """A trainer Deployment (one that carries the job label)."""

    namespace: str
    name: str
    job: str
    """The job's name (the label's value)."""
    selector: LabelSelector
    replicas: int
    created: float
    annotations: Mapping[str, str]
    priority_class: str | None
    worker: Resources
    tolerations: tuple[Toleration, ...]
    node_selector: Mapping[str, str]
    problem: str | None = None
    """Why the template cannot be read (bad quantities, an unsupported selector)."""
    uid: str = ""
    generation: int = 0
    job_class: str | None = None
    """The ``edl.paddlepaddle.org/class`` label (None: history per job only)."""
    queue: str | None = None
    """The Kueue LocalQueue its ``kueue.x-k8s.io/queue-name`` label names (None: none)."""


@dataclass(frozen=True, slots=True)
class PriorityClassRecord:
    """A PriorityClass: its value and whether it is the global default."""

    name: str
    value: int
    global_default: bool = False


def timestamp(text: str | None) -> float:
    """RFC 3339 (``2026-05-01T12:00:00Z``) to Unix seconds; 0 when absent or malformed."""
    if not text:
        return 0.0
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler counts for a pod spec.

    Raises:
        ResourceError: a quantity is malformed.
    """
    total = Resources()
    for c in spec.get("containers") or []:
        total = total + _container_requests(c)
    for c in spec.get("initContainers") or []:
        total = total.maximum(_container_requests(c))
    return total + Resources.parse(spec.get("overhead"))


def _requests_key(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The raw quantities `pod_requests` reads, as a key (None: not hashable as they are)."""

    def amounts(c: Mapping[str, Any]) -> tuple[Any, ...]:
        res = c.get("resources") or {}
        return tuple(sorted((res.get("requests") or {}).items())), tuple(
            sorted((res.get("limits") or {}).items())
        )

    key = (
        tuple(amounts(c) for c in spec.get("containers") or ()),
        tuple(amounts(c) for c in spec.get("initContainers") or ()),
        tuple(sorted((spec.get("overhead") or {}).items())),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _container_requests(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    merged = dict(res.get("limits") or {})
    merged.update(res.get("requests") or {})
    return Resources.parse(merged)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or []
    )


def node_from(obj: Mapping[str, Any]) -> Node:
    """A Node object; a malformed allocatable amount counts as none (the node offers no room)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    try:
        allocatable = Resources.parse(status.get("allocatable"))
    except ResourceError:
        allocatable = Resources()
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("taints") or []
    )
    return Node(
        name=str(meta.get("name", "")),
        allocatable=allocatable,
        ready=ready,
        schedulable=not spec.get("unschedulable", False),
        taints=taints,
        labels=dict(meta.get("labels") or {}),
    )


class _Metadata(TypedDict, total=False):
    name: str
    namespace: str
    labels: dict[str, Any] | None
    creationTimestamp: str | None
    deletionTimestamp: str | None
    finalizers: list[str] | None
    resourceVersion: str
    uid: str


class _Resources(TypedDict, total=False):
    requests: dict[str, Any] | None
    limits: dict[str, Any] | None


class _Container(TypedDict, total=False):
    resources: _Resources | None


class _PodSpec(TypedDict, total=False):
    nodeName: str | None
    priority: Any
    containers: list[_Container] | None
    initContainers: list[_Container] | None
    overhead: dict[str, Any] | None
    tolerations: list[dict[str, Any]] | None
    nodeSelector: dict[str, Any] | None
    schedulingGates: list[dict[str, Any]] | None


class _PodStatus(TypedDict, total=False):
    phase: str | None


class _Pod(TypedDict, total=False):
    metadata: _Metadata
    spec: _PodSpec
    status: _PodStatus


class _PodList(TypedDict, total=False):
    items: list[_Pod] | None
    metadata: dict[str, Any] | None


_POD_LIST = msgspec.json.Decoder(_PodList)


def decode_pod_list(data: bytes) -> dict[str, Any]:
    """A page of a pod list with only what `pod_from` reads (and the list's metadata).

    The rest of each pod (its managed fields, status conditions, container statuses, most
    of its spec: most of its bytes) is skipped while parsing, not built and thrown away.
    """
    return dict(_POD_LIST.decode(data))


def pod_from(obj: Mapping[str, Any], shared: SharedValues | None = None) -> PodRecord | None:
    """A Pod object, or None when it no longer counts (terminal, or being deleted).

    With ``shared``, what pods have in common (namespace, node, requests, tolerations, label
    sets) is kept once for all of them: the record holds its own name and creation time.
    """
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    releasing = bool(meta.get("deletionTimestamp")) and MANAGED in (meta.get("finalizers") or ())
    if (meta.get("deletionTimestamp") and not releasing) or status.get("phase") in _TERMINAL:
        return None
    values = shared if shared is not None else SharedValues(limit=0)
    try:
        key = _requests_key(spec)
        requests = values.memo(key, lambda: pod_requests(spec)) if key else pod_requests(spec)
    except ResourceError:
        requests = Resources()  # the API server validated it; never seen in practice
    node = spec.get("nodeName") or None
    pod = Pod(
        namespace=values.text(str(meta.get("namespace", ""))),
        name=str(meta.get("name", "")),
        requests=values.value(requests),
        priority=int(spec.get("priority") or 0),
        node=values.text(str(node)) if node else None,
        tolerations=values.value(_tolerations(spec)),
        node_selector=values.labels(spec.get("nodeSelector")),
    )
    gates = spec.get("schedulingGates") or ()
    return PodRecord(
        pod,
        values.labels(meta.get("labels")),
        timestamp(meta.get("creationTimestamp")),
        any(g.get("name") == ADMISSION_GATE for g in gates),
        releasing,
    )


def selector_from(obj: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions).

    Raises:
        ValueError: an operator this selector cannot express.
    """
    obj = obj or {}
    reqs = [
        Requirement(str(k), Operator.EQUALS, (str(v),))
        for k, v in sorted((obj.get("matchLabels") or {}).items())
    ]
    for e in obj.get("matchExpressions") or []:
        op = e.get("operator")
        if op == "DoesNotExist":
            reqs.append(Requirement(str(e.get("key")), Operator.DOES_NOT_EXIST))
        elif op in _OPERATORS:
            values = tuple(str(v) for v in e.get("values") or [])
            reqs.append(Requirement(str(e.get("key")), _OPERATORS[op], values))
        else:
            raise ValueError(f"selector operator {op!r} is not supported")
    return LabelSelector(tuple(reqs))


def deployment_from(obj: Mapping[str, Any]) -> DeploymentRecord | None:
    """A Deployment carrying the job label; None for any other, and for one at 0 replicas.

    At 0: a finished job's, or one parked by hand (the HPA does not act on it either).
    """
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    labels = meta.get("labels") or {}
    job = labels.get(JOB_LABEL)
    if not job or meta.get("deletionTimestamp") or labels.get(STATE_LABEL) == FINISHED:
        return None
    if spec.get("replicas") == 0:
        return None
    template = (spec.get("template") or {}).get("spec") or {}
    problem = None
    try:
        worker = pod_requests(template)
    except ResourceError as e:
        worker, problem = Resources(), f"its pod template has a bad request: {e}"
    try:
        selector = selector_from(spec.get("selector"))
    except ValueError as e:
        selector, problem = (
            LabelSelector((Requirement(JOB_LABEL, Operator.DOES_NOT_EXIST),)),
            str(e),
        )
    annotations = {
        k: str(v) for k, v in (meta.get("annotations") or {}).items() if k in _ANNOTATIONS
    }
    replicas = spec.get("replicas")
    return DeploymentRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        job=str(job),
        selector=selector,
        replicas=1 if replicas is None else int(replicas),
        created=timestamp(meta.get("creationTimestamp")),
        annotations=annotations,
        priority_class=template.get("priorityClassName") or None,
        worker=worker,
        tolerations=_tolerations(template),
        node_selector=dict(template.get("nodeSelector") or {}),
        problem=problem,
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        job_class=str((meta.get("labels") or {}).get(CLASS_LABEL) or "") or None,
        queue=str(labels.get(QUEUE_LABEL) or "") or None,
    )


def priority_class_from(obj: Mapping[str, Any]) -> PriorityClassRecord:
    """A PriorityClass object."""
    meta = obj.get("metadata") or {}
    return PriorityClassRecord(
        str(meta.get("name", "")), int(obj.get("value") or 0), bool(obj.get("globalDefault"))
    )


def _annotation(
    annotations: Mapping[str, str], key: str, default: float, integer: bool
) -> tuple[float, str | None]:
    raw = annotations.get(key)
    if raw is None:
        return default, None
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        return default, f"annotation {key}: {raw!r} is not {kind}"
    return value, None


_QUOTA_KEYS = {
    "requests.cpu": "cpu",
    "cpu": "cpu",
    "requests.memory": "memory",
    "memory": "memory",
    "requests.nvidia.com/gpu": "gpu",
    "pods": "pods",
    "count/pods": "pods",
}
"""ResourceQuota names -> what they limit of a new worker pod (requests; ``pods``)."""


def quota_from(obj: Mapping[str, Any]) -> Quota | None:
    """What a ResourceQuota still admits: ``status.hard - status.used``.

    None when it limits nothing a worker asks for or its status is not filled in yet. A
    quota with a scope (``spec.scopes``, ``scopeSelector``) is taken as applying to the
    workers too: the sizer then plans fewer, never a pod the API server refuses. An amount
    that is not a quantity is skipped (the API server validates them).
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    hard = status.get("hard") or {}
    used = status.get("used") or {}
    left: dict[str, float] = {}
    for name, key in _QUOTA_KEYS.items():
        if name not in hard:
            continue
        try:
            value = float(
                parse_quantity(str(hard[name])) - parse_quantity(str(used.get(name, "0")))
            )
        except QuantityError:
            continue
        left[key] = min(left.get(key, value), value)
    if not left:
        return None
    return Quota(str(meta.get("namespace", "")), str(meta.get("name", "")), left)


def job_from(
    d: DeploymentRecord,
    classes: Mapping[str, PriorityClassRecord],
    defaults: JobDefaults,
    last_rescale: float | None = None,
) -> Job:
    """The sizer's Job for a trainer Deployment (``error`` set when it cannot be sized).

    ``last_rescale``: when its latest pod was created (None: no pod, or none known).
    """
    a = d.annotations
    low, e1 = _annotation(a, MIN_WORKERS, defaults.min_workers, True)
    high, e2 = _annotation(a, MAX_WORKERS, defaults.max_workers, True)
    weight, e3 = _annotation(a, WEIGHT, defaults.weight, False)
    threshold, e4 = _annotation(a, MIN_MARGINAL_SPEEDUP, defaults.min_marginal_speedup, False)
    requested, e5 = _annotation(a, REQUESTED_WORKERS, 0, True)
    errors = [e for e in (d.problem, e1, e2, e3, e4, e5) if e]
    if not errors and requested < 0:
        errors.append(f"annotation {REQUESTED_WORKERS}: {int(requested)} must be at least 0")
    if not errors and low < 1:
        errors.append(f"annotation {MIN_WORKERS}: {int(low)} must be at least 1")
    priority = 0
    if d.priority_class is not None:
        cls = classes.get(d.priority_class)
        if cls is None:
            errors.append(f"PriorityClass {d.priority_class!r} does not exist")
        else:
            priority = cls.value
    else:
        priority = next((c.value for c in classes.values() if c.global_default), 0)
    return Job(
        namespace=d.namespace,
        name=d.name,
        worker=d.worker,
        replicas=d.replicas,
        min_replicas=int(low),
        max_replicas=int(high),
        weight=weight,
        min_marginal_speedup=threshold,
        priority=priority,
        arrival=d.created,
        requested=int(requested),
        job_class=d.job_class,
        last_rescale=last_rescale,
        tolerations=d.tolerations,
        node_selector=d.node_selector,
        error="; ".join(errors) or None,
    )


def assemble(
    nodes: Iterable[Node],
    pods: Iterable[PodRecord],
    deployments: Iterable[DeploymentRecord],
    classes: Iterable[PriorityClassRecord],
    defaults: JobDefaults | None = None,
    quotas: Iterable[Quota] = (),
    pods_in_key_order: bool = False,
    queues: Iterable[ClusterQueueRecord] | None = None,
    local_queues: Mapping[tuple[str, str], str] | None = None,
    waiting: Iterable[WaitingWorkload] = (),
    holding: Collection[str] = (),
    attributed: AttributedPods | None = None,
) -> ClusterSnapshot:
    """The cluster view: pods attributed to their job, jobs with priority and last growth.

    The snapshot's pods are in key order (``namespace/name``, the order `decide` takes them
    in); ``pods_in_key_order`` says they come so (a watch keeps them so) and are not sorted
    again. With ``queues`` (Kueue's ClusterQueues are read; ``local_queues``: (namespace,
    LocalQueue) -> ClusterQueue), a job labelled with a LocalQueue gets its ClusterQueue
    and how many of its workers Kueue has admitted, the snapshot what each ClusterQueue
    still admits (counting those workers, whatever its status says yet), a pod of another
    workload that waits for Kueue's admission the ClusterQueue it waits in, and the
    ``waiting`` Workloads without a pod (batch Jobs) as demand on their ClusterQueue.
    A pod in ``holding`` (``namespace/name``: its Workload holds quota) is admitted though
    its gate is not gone yet: counted once, in its queue's usage, never also as waiting.

    With ``attributed`` (kept up to date from the pods' watch events by
    :class:`~metrics_adapter.sizing.pod_view.PodView`, for the same Deployments' selectors),
    ``pods`` is not read: the pods and each job's latest pod creation come from it (not with
    ``queues``: Kueue's usage is counted pod by pod).

    Raises:
        ValueError: ``attributed`` given with ``queues``.
    """
    by_class = {c.name: c for c in classes}
    deps = sorted(deployments, key=lambda d: (d.namespace, d.name))
    last_growth: dict[str, float] = {}
    admitted: dict[str, int] = {}
    out_pods: list[Pod] = []
    usage = QueueUsage(local_queues or {})
    if attributed is not None:
        if queues is not None:
            raise ValueError("pods attributed beforehand cannot be counted in Kueue's queues")
        last_growth = dict(attributed.last_growth)
    else:
        owners = owner_indexes(deps)
        ordered = pods if pods_in_key_order else sorted(pods, key=lambda r: r.pod.key)
        for record in ordered:
            pod = record.pod
            if record.releasing:
                continue
            queued = record.queued and pod.key not in holding
            if queues is not None:
                usage.add(pod.namespace, record.labels, pod.requests, queued)
            owned = attribute(record, owners)
            if owned.job is not None:
                key = owned.job
                last_growth[key] = max(last_growth.get(key, 0.0), record.created)
                admitted[key] = admitted.get(key, 0) + (not queued)
            elif queued and queues is not None:  # another workload waiting in a queue
                target = usage.cluster_queue(pod.namespace, record.labels)
                if target is not None:
                    owned = replace(pod, queue=target)
            out_pods.append(owned)
    claimed: dict[tuple[str, str], list[str]] = {}
    for d in deps:
        claimed.setdefault((d.namespace, d.job), []).append(d.name)
    jobs: dict[str, Job] = {}
    names: dict[str, str] = {}
    for d in deps:
        grown = last_growth.get(f"{d.namespace}/{d.name}")
        job = job_from(d, by_class, defaults or JobDefaults(), grown or None)
        others = [n for n in claimed[(d.namespace, d.job)] if n != d.name]
        if others:
            clash = f"Deployments {', '.join(sorted([d.name, *others]))} carry {JOB_LABEL}={d.job}"
            job = _with_error(job, clash)
        jobs[job.key] = job
        names[job.key] = d.job
    quotas_of_queues: tuple[QueueQuota, ...] = ()
    if queues is not None:
        for d in deps:
            key = f"{d.namespace}/{d.name}"
            if d.queue is None:
                continue
            target = (local_queues or {}).get((d.namespace, d.queue))
            cluster_queue = target or f"of LocalQueue {d.namespace}/{d.queue} (none such)"
            jobs[key] = replace(jobs[key], queue=cluster_queue, admitted=admitted.get(key, 0))
        quotas_of_queues = queue_quotas(queues, usage)
    return ClusterSnapshot(
        tuple(sorted(nodes, key=lambda n: n.name)),
        attributed.pods if attributed is not None else tuple(out_pods),
        tuple(jobs[k] for k in sorted(jobs)),
        job_names=names,
        quotas=tuple(sorted(quotas, key=lambda q: (q.namespace, q.name))),
        queues=quotas_of_queues,
        waiting=waiting_demands(waiting, local_queues or {}) if queues is not None else (),
    )


class AttributedPods(NamedTuple):
    """The view's pods, attributed to their jobs, and each job's latest pod creation."""

    pods: tuple[Pod, ...]
    """Key order, releasing pods left out; a job's worker carries its job's key."""
    last_growth: Mapping[str, float]
    """Job key -> the latest creation time of its pods (0 when none was known)."""


def owner_indexes(deployments: Iterable[DeploymentRecord]) -> dict[str, SelectorIndex]:
    """Per namespace, the index that finds a pod's owning Deployment.

    ``deployments`` in (namespace, name) order: the first match by name owns the pod.
    """
    per_namespace: dict[str, list[DeploymentRecord]] = {}
    for d in deployments:
        per_namespace.setdefault(d.namespace, []).append(d)
    return {ns: SelectorIndex(ds) for ns, ds in per_namespace.items()}


def attribute(record: PodRecord, owners: Mapping[str, SelectorIndex]) -> Pod:
    """The record's pod as the view has it: with its job's key when a Deployment owns it."""
    pod = record.pod
    index = owners.get(pod.namespace)
    owner = index.owner(record.labels) if index is not None else None
    if owner is None:
        return pod
    return Pod(
        pod.namespace, pod.name, pod.requests, pod.priority, pod.node,
        f"{owner.namespace}/{owner.name}", pod.tolerations, pod.node_selector,
    )  # fmt: skip


class SelectorIndex:
    """Finds the first Deployment (by name) whose selector matches a pod's labels.

    Selectors that start with an equality (``app=trainer``) are indexed by it, so a pod is
    checked against the few Deployments that could match, not against all of them.
    """

    def __init__(self, deployments: list[DeploymentRecord]) -> None:
        self._order = {d.name: i for i, d in enumerate(deployments)}
        self._by_pair: dict[tuple[str, str], list[DeploymentRecord]] = {}
        self._keys: list[str] = []
        self._other: list[DeploymentRecord] = []
        for d in deployments:
            first = d.selector.requirements[0] if d.selector.requirements else None
            if first is not None and first.operator is Operator.EQUALS:
                if first.key not in self._keys:
                    self._keys.append(first.key)
                self._by_pair.setdefault((first.key, first.values[0]), []).append(d)
            else:
                self._other.append(d)

    def owner(self, labels: Mapping[str, str]) -> DeploymentRecord | None:
        """The first Deployment by name whose selector matches ``labels`` (None: none)."""
        found = [
            d
            for key in self._keys
            if key in labels
            for d in self._by_pair.get((key, labels[key]), ())
            if d.selector.matches(labels)
        ]
        found += [d for d in self._other if d.selector.matches(labels)]
        return min(found, key=lambda d: self._order[d.name]) if found else None


def _with_error(job: Job, message: str) -> Job:
    return replace(job, error=f"{job.error}; {message}" if job.error else message)
