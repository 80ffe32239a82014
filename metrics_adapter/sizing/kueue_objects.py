"""Kueue's ClusterQueues and LocalQueues (``kueue.x-k8s.io/v1beta2``) to the sizer's values.

Pure functions, as :mod:`metrics_adapter.sizing.kube_objects`: the watch keeps a compact
record of each queue, and :func:`queue_quotas` turns the ClusterQueues into what each still
admits (:class:`~edl_sizing.queues.QueueQuota`). A trainer Deployment names its LocalQueue
in the label ``kueue.x-k8s.io/queue-name``; Kueue admits each of its pods as a Workload of
its own and holds it back with the scheduling gate ``kueue.x-k8s.io/admission`` until then.

What one (flavor, resource) of a ClusterQueue still admits, as Kueue counts it: its nominal
quota minus its reservation (``status.flavorsReservation``); in a cohort
(``spec.cohortName``) also what the cohort's members do not use of what they lend
(``lendingLimit``, else all their nominal quota), up to its own ``borrowingLimit``. A
ClusterQueue that is stopped (``spec.stopPolicy``) or not Active admits nothing. Not read:
hierarchical Cohort objects' own quota (what they add is not planned: fewer workers, never
one left waiting), flavors' node labels and taints, the ClusterQueue's namespaceSelector.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from edl_common.quantity import QuantityError, parse_quantity
from edl_sizing.queues import FlavorRoom, QueueDemand, QueueGroup, QueueQuota
from edl_sizing.resources import Resources

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""On a Deployment (and its pods): the LocalQueue, in its namespace, that queues it."""
ADMISSION_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue keeps on a pod until its Workload is admitted."""
MANAGED = "kueue.x-k8s.io/managed"
"""Label (``"true"``) of the pods Kueue manages, and its finalizer on them: a pod being
deleted keeps its quota until Kueue lets it go."""
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
_RESOURCES = {"cpu": "cpu", "memory": "memory", "nvidia.com/gpu": "gpu", "pods": "pods"}
"""Kueue's resource names -> the sizer's keys (others are not what a worker is sized by)."""
_STOPPED = ("Hold", "HoldAndDrain")


@dataclass(frozen=True, slots=True)
class Limits:
    """One (flavor, resource) of a ClusterQueue: its quota and borrowing limits."""

    nominal: float
    borrowing: float | None = None
    """None: no limit of its own (the cohort's unused quota bounds it)."""
    lending: float | None = None
    """None: all of ``nominal`` may be lent."""


@dataclass(frozen=True, slots=True)
class ClusterQueueRecord:
    """A ClusterQueue as the sizer keeps it."""

    name: str
    cohort: str | None
    groups: tuple[tuple[frozenset[str], tuple[tuple[str, Mapping[str, Limits]], ...]], ...]
    """Resource groups: (covered keys, ((flavor, key -> limits), ...) in order)."""
    used: Mapping[str, Mapping[str, float]]
    """Flavor -> key -> quota reserved by its admitted Workloads."""
    active: bool = True


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """A Workload that holds quota: where, and how much of each flavor."""

    cluster_queue: str
    used: Mapping[str, Mapping[str, float]]
    """Flavor -> key -> what its pods take (``status.admission``)."""
    pod: str | None = None
    """``namespace/name`` of the Pod that owns it (Kueue's pod integration); None: none."""


@dataclass(frozen=True, slots=True)
class WaitingWorkload:
    """A Workload waiting for quota, as Kueue last considered it (``status.resourceRequests``)."""

    namespace: str
    name: str
    local_queue: str
    priority: int
    requests: Resources
    """What all its pods request together."""
    pods: int
    of_pod: bool
    """Its owner is a Pod (Kueue's pod integration): the pod, gated, says it already."""


@dataclass(frozen=True, slots=True)
class LocalQueueRecord:
    """A LocalQueue: the ClusterQueue its Workloads go to."""

    namespace: str
    name: str
    cluster_queue: str


def _amount(raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        return float(parse_quantity(str(raw)))
    except QuantityError:
        return None


def cluster_queue_from(obj: Mapping[str, Any]) -> ClusterQueueRecord:
    """A ClusterQueue object (amounts that are not quantities count as 0)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    groups = []
    for group in spec.get("resourceGroups") or []:
        covered = frozenset(
            _RESOURCES.get(str(r), str(r)) for r in group.get("coveredResources") or []
        )
        flavors = []
        for flavor in group.get("flavors") or []:
            limits = {
                _RESOURCES.get(str(r.get("name")), str(r.get("name"))): Limits(
                    _amount(r.get("nominalQuota")) or 0.0,
                    _amount(r.get("borrowingLimit")),
                    _amount(r.get("lendingLimit")),
                )
                for r in flavor.get("resources") or []
            }
            flavors.append((str(flavor.get("name", "")), limits))
        groups.append((covered, tuple(flavors)))
    reserved = status.get("flavorsReservation") or status.get("flavorsUsage") or []
    used = {
        str(f.get("name", "")): {
            _RESOURCES.get(str(r.get("name")), str(r.get("name"))): _amount(r.get("total")) or 0.0
            for r in f.get("resources") or []
        }
        for f in reserved
    }
    active = spec.get("stopPolicy") not in _STOPPED and not any(
        c.get("type") == "Active" and c.get("status") == "False"
        for c in status.get("conditions") or []
    )
    return ClusterQueueRecord(
        str(meta.get("name", "")),
        str(spec.get("cohortName") or "") or None,
        tuple(groups),
        used,
        active,
    )


def workload_from(obj: Mapping[str, Any]) -> WorkloadRecord | WaitingWorkload | None:
    """A Workload holding quota, or one waiting for it; None for any other.

    Holding: ``QuotaReserved`` and not ``Finished``. Waiting: not yet, and considered by
    Kueue (``status.resourceRequests``). Holding is what Kueue's own cache counts, written
    when it decides: a ClusterQueue's status is written later, so the sizer sums its
    Workloads instead.
    """
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") == "True" for c in status.get("conditions") or []}
    admission = status.get("admission") or {}
    if conditions.get("Finished") or spec.get("active") is False:
        return None
    if not conditions.get("QuotaReserved") or not admission:
        return _waiting(meta, spec, status)
    used: dict[str, dict[str, float]] = {}
    for podset in admission.get("podSetAssignments") or []:
        flavors = podset.get("flavors") or {}
        for name, raw in (podset.get("resourceUsage") or {}).items():
            flavor = flavors.get(name)
            if flavor is None:
                continue
            key = _RESOURCES.get(str(name), str(name))
            mine = used.setdefault(str(flavor), {})
            mine[key] = mine.get(key, 0.0) + (_amount(raw) or 0.0)
    owner = next(
        (str(o.get("name")) for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"),
        None,
    )
    pod = f"{meta.get('namespace', '')}/{owner}" if owner else None
    return WorkloadRecord(str(admission.get("clusterQueue", "")), used, pod)


def _waiting(
    meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]
) -> WaitingWorkload | None:
    asked = status.get("resourceRequests") or []
    if not asked or not spec.get("queueName"):
        return None  # not considered by Kueue yet: a later round sees it
    total: dict[str, float] = {}
    for podset in asked:
        for name, raw in (podset.get("resources") or {}).items():
            key = _RESOURCES.get(str(name), str(name))
            total[key] = total.get(key, 0.0) + (_amount(raw) or 0.0)
    return WaitingWorkload(
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str(spec["queueName"]),
        int(spec.get("priority") or 0),
        Resources(total.get("cpu", 0.0), total.get("memory", 0.0), total.get("gpu", 0.0)),
        sum(int(p.get("count") or 0) for p in spec.get("podSets") or []),
        any(o.get("kind") == "Pod" for o in meta.get("ownerReferences") or []),
    )


def waiting_demands(
    waiting: Iterable[WaitingWorkload], local_queues: Mapping[tuple[str, str], str]
) -> tuple[QueueDemand, ...]:
    """The waiting Workloads that have no pod to show, as demand on their ClusterQueue."""
    out = []
    for w in sorted(waiting, key=lambda w: (w.namespace, w.name)):
        target = local_queues.get((w.namespace, w.local_queue))
        if target is None or w.of_pod:
            continue
        out.append(QueueDemand(f"{w.namespace}/{w.name}", target, w.priority, w.requests, w.pods))
    return tuple(out)


def holding_pods(workloads: Iterable[WorkloadRecord | WaitingWorkload]) -> frozenset[str]:
    """``namespace/name`` of the pods whose Workload holds quota, gated or not yet.

    Kueue reserves the quota in the Workload first and lifts the pod's gate after, and the
    two watches may tell that in either order: a pod still gated whose Workload holds quota
    is admitted, else its quota would count twice (in use, and as a pod waiting for it).
    """
    return frozenset(
        w.pod for w in workloads if isinstance(w, WorkloadRecord) and w.pod is not None
    )


def with_workloads(
    queues: Iterable[ClusterQueueRecord],
    workloads: Iterable[WorkloadRecord | WaitingWorkload],
    live_pods: Collection[str] | None = None,
) -> list[ClusterQueueRecord]:
    """The ClusterQueues with their usage summed over the Workloads that hold quota.

    With ``live_pods`` (``namespace/name`` of the pods not being deleted), a pod's Workload
    counts only while its pod lives: Kueue finishes it when the pod goes, and the two
    watches may tell that in either order (a worker given up would be given up twice).
    """
    used: dict[str, dict[str, dict[str, float]]] = {}
    for w in workloads:
        if not isinstance(w, WorkloadRecord):
            continue
        if w.pod is not None and live_pods is not None and w.pod not in live_pods:
            continue
        mine = used.setdefault(w.cluster_queue, {})
        for flavor, amounts in w.used.items():
            into = mine.setdefault(flavor, {})
            for key, amount in amounts.items():
                into[key] = into.get(key, 0.0) + amount
    return [
        ClusterQueueRecord(q.name, q.cohort, q.groups, used.get(q.name, {}), q.active)
        for q in queues
    ]


def local_queue_from(obj: Mapping[str, Any]) -> LocalQueueRecord | None:
    """A LocalQueue object; None without a ClusterQueue."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    target = spec.get("clusterQueue")
    if not target:
        return None
    return LocalQueueRecord(str(meta.get("namespace", "")), str(meta.get("name", "")), str(target))


class QueueUsage:
    """What the admitted pods Kueue manages hold of each ClusterQueue, as they show it now.

    Their Workloads are written by Kueue as it admits them, and its pod watch and the
    sizer's Workload watch may tell them apart in time: an admitted pod (no admission gate)
    always counts.
    """

    def __init__(self, local_queues: Mapping[tuple[str, str], str]) -> None:
        self.local_queues = local_queues
        self.admitted: dict[str, dict[str, float]] = {}

    def cluster_queue(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """The ClusterQueue a pod's LocalQueue label leads to (None: none)."""
        return self.local_queues.get((namespace, labels.get(QUEUE_LABEL, "")))

    def add(
        self, namespace: str, labels: Mapping[str, str], requests: Resources, queued: bool
    ) -> None:
        """One live pod (admitted unless ``queued``)."""
        if labels.get(MANAGED) != "true" or queued:
            return
        target = self.cluster_queue(namespace, labels)
        if target is None:
            return
        into = self.admitted.setdefault(target, {})
        for key, amount in (("cpu", requests.cpu), ("memory", requests.memory),
                            ("gpu", requests.gpu), ("pods", 1.0)):  # fmt: skip
            into[key] = into.get(key, 0.0) + amount


def queue_quotas(
    queues: Iterable[ClusterQueueRecord], usage: QueueUsage | None = None
) -> tuple[QueueQuota, ...]:
    """What each ClusterQueue still admits, by name, with its cohort's lendable quota.

    With ``usage`` (what its pods show), a queue's usage is taken as at least what its
    admitted pods request (the excess on its flavors in order, as Kueue fills them): a pod
    just admitted is never counted as room.
    """
    admitted = usage.admitted if usage is not None else {}
    records = sorted((_at_least(q, admitted.get(q.name, {})) for q in queues), key=lambda q: q.name)
    pools: dict[tuple[str, str, str], float] = {}
    """(cohort, flavor, key) -> what the cohort's members lend and do not use themselves."""
    for q in records:
        if q.cohort is None:
            continue
        for _, flavors in q.groups:
            for flavor, limits in flavors:
                for key, lim in limits.items():
                    pool = (q.cohort, flavor, key)
                    lent = lim.nominal if lim.lending is None else min(lim.lending, lim.nominal)
                    kept = lim.nominal - lent
                    over = max(0.0, q.used.get(flavor, {}).get(key, 0.0) - kept)
                    pools[pool] = pools.get(pool, 0.0) + lent - over
    return tuple(_quota(q, pools) for q in records)


def _at_least(q: ClusterQueueRecord, floor: Mapping[str, float]) -> ClusterQueueRecord:
    used = {flavor: dict(amounts) for flavor, amounts in q.used.items()}
    for covered, flavors in q.groups:
        for key in covered:
            missing = floor.get(key, 0.0) - sum(used.get(f, {}).get(key, 0.0) for f, _ in flavors)
            for i, (flavor, limits) in enumerate(flavors):
                if missing <= 0:
                    break
                mine = used.setdefault(flavor, {})
                last = i == len(flavors) - 1
                nominal = limits[key].nominal if key in limits else 0.0
                add = missing if last else min(missing, max(0.0, nominal - mine.get(key, 0.0)))
                mine[key] = mine.get(key, 0.0) + add
                missing -= add
    return ClusterQueueRecord(q.name, q.cohort, q.groups, used, q.active)


def _quota(q: ClusterQueueRecord, pools: Mapping[tuple[str, str, str], float]) -> QueueQuota:
    if not q.active:
        return QueueQuota(q.name)
    groups = []
    for covered, flavors in q.groups:
        rooms = []
        for flavor, limits in flavors:
            left = {}
            for key, lim in limits.items():
                used = q.used.get(flavor, {}).get(key, 0.0)
                if q.cohort is None:
                    left[key] = lim.nominal - used
                    continue
                lent = lim.nominal if lim.lending is None else min(lim.lending, lim.nominal)
                kept = max(0.0, lim.nominal - lent - used)
                ceiling = math.inf if lim.borrowing is None else lim.nominal + lim.borrowing - used
                left[key] = min(kept + max(0.0, pools.get((q.cohort, flavor, key), 0.0)), ceiling)
            rooms.append(FlavorRoom(flavor, left))
        groups.append(QueueGroup(covered, tuple(rooms)))
    return QueueQuota(q.name, tuple(groups))


def cluster_queues_of(
    local_queues: Iterable[LocalQueueRecord],
) -> dict[tuple[str, str], str]:
    """(namespace, LocalQueue) -> its ClusterQueue."""
    return {(lq.namespace, lq.name): lq.cluster_queue for lq in local_queues}
