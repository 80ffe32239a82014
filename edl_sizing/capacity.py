"""Capacity sources: where the sizer's view of the cluster comes from.

A :class:`CapacitySource` answers one question, "what does the cluster look like now?", as
a :class:`ClusterSnapshot` of plain values (no I/O here: files and watches are the
adapter's, :mod:`metrics_adapter.sizing.capacity_file` and
:mod:`metrics_adapter.sizing.cluster_watch`). The Kubernetes source
(:mod:`metrics_adapter.sizing.cluster_watch`) watches Nodes, Pods, PriorityClasses and trainer
Deployments; :class:`StaticCapacitySource` holds a fixed (replaceable) snapshot, read from
a mapping (or a YAML text), for demos, tests and simulators::

    nodes:
      - name: slots
        allocatable: {cpu: "4", memory: 8Gi}      # Kubernetes quantities
        taints: [{key: dedicated, value: web, effect: NoSchedule}]   # optional
    pods:                                         # optional: other work
      - {namespace: web, name: web-0, requests: {cpu: "1"}, priority: 1000, node: slots}
    jobs:
      - namespace: default
        name: digits
        replicas: 2
        worker: {cpu: "1"}
        minReplicas: 1
        maxReplicas: 4
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from edl_sizing.cluster import Job, Node, Pod, Quota, Taint, Toleration
from edl_sizing.queues import QueueDemand, QueueQuota
from edl_sizing.resources import ResourceError, Resources


class CapacityError(ValueError):
    """A capacity description is invalid; the message names the entry."""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one sizing round reads about the cluster."""

    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    """Non-terminal pods that are not being deleted, bound or Pending."""
    jobs: tuple[Job, ...] = ()
    """Elastic jobs, without their measured history (the sizer adds it)."""
    job_names: Mapping[str, str] = field(default_factory=dict)
    """Job key -> the name a metric selector uses for it (``edl.paddlepaddle.org/job``);
    a job missing here goes by ``Job.name``."""
    quotas: tuple[Quota, ...] = ()
    """What each namespace's ResourceQuotas still admit."""
    queues: tuple[QueueQuota, ...] = ()
    """What each Kueue ClusterQueue still admits (jobs name theirs in ``Job.queue``)."""
    waiting: tuple[QueueDemand, ...] = ()
    """Workloads waiting in a ClusterQueue without a pod yet (batch Jobs, JobSets)."""


class CapacitySource(Protocol):
    """Something that can say what the cluster looks like now."""

    def snapshot(self) -> ClusterSnapshot | None:
        """The current view; None while it is not known yet (e.g. a watch not synced)."""
        ...


class StaticCapacitySource:
    """A fixed snapshot, replaced as a whole when the caller's cluster changes."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot
        self._lock = threading.Lock()

    def snapshot(self) -> ClusterSnapshot:
        """The snapshot in force."""
        with self._lock:
            return self._snapshot

    def replace(self, snapshot: ClusterSnapshot) -> None:
        """Swap in a new snapshot."""
        with self._lock:
            self._snapshot = snapshot


def snapshot_from_yaml(text: str, source: str = "<capacity>") -> ClusterSnapshot:
    """Parse the YAML form shown in the module docstring.

    Raises:
        CapacityError: the text is not YAML or not a valid capacity description.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CapacityError(f"cannot read capacity file {source}: {e}") from e
    return snapshot_from_dict(doc if doc is not None else {}, source)


def snapshot_from_dict(doc: Any, source: str = "<capacity>") -> ClusterSnapshot:
    """Parse the mapping form shown in the module docstring.

    Raises:
        CapacityError: naming the source and the bad entry.
    """
    if not isinstance(doc, Mapping):
        raise CapacityError(f"{source}: expected a mapping with nodes, pods and jobs")
    unknown = set(doc) - {"nodes", "pods", "jobs"}
    if unknown:
        raise CapacityError(f"{source}: unknown keys {sorted(unknown)}")
    nodes = tuple(_each(doc, "nodes", source, _node))
    pods = tuple(_each(doc, "pods", source, _pod))
    jobs = tuple(_each(doc, "jobs", source, _job))
    return ClusterSnapshot(nodes, pods, jobs)


def _each(doc: Mapping[str, Any], key: str, source: str, parse: Any) -> list[Any]:
    entries = doc.get(key) or []
    if not isinstance(entries, list):
        raise CapacityError(f"{source}: {key} must be a list")
    out = []
    for i, entry in enumerate(entries):
        where = f"{source}: {key}[{i}]"
        if not isinstance(entry, Mapping):
            raise CapacityError(f"{where}: expected a mapping")
        try:
            out.append(parse(entry))
        except (KeyError, TypeError, ValueError, ResourceError) as e:
            raise CapacityError(f"{where}: {e}") from e
    return out


def _resources(value: Any) -> Resources:
    if value is not None and not isinstance(value, Mapping):
        raise ValueError("a resource map must be a mapping like {cpu: '1', memory: 1Gi}")
    return Resources.parse(value)


def _labels(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


def _node(e: Mapping[str, Any]) -> Node:
    taints = tuple(
        Taint(str(t["key"]), str(t.get("value", "")), str(t.get("effect", "NoSchedule")))
        for t in e.get("taints") or []
    )
    return Node(
        name=str(e["name"]),
        allocatable=_resources(e.get("allocatable")),
        ready=bool(e.get("ready", True)),
        schedulable=bool(e.get("schedulable", True)),
        taints=taints,
        labels=_labels(e.get("labels")),
    )


def _tolerations(value: Any) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            str(t.get("key", "")),
            str(t.get("operator", "Equal")),
            str(t.get("value", "")),
            str(t.get("effect", "")),
        )
        for t in value or []
    )


def _pod(e: Mapping[str, Any]) -> Pod:
    return Pod(
        namespace=str(e.get("namespace", "default")),
        name=str(e["name"]),
        requests=_resources(e.get("requests")),
        priority=int(e.get("priority", 0)),
        node=str(e["node"]) if e.get("node") else None,
        job=str(e["job"]) if e.get("job") else None,
        tolerations=_tolerations(e.get("tolerations")),
        node_selector=_labels(e.get("nodeSelector")),
    )


def _job(e: Mapping[str, Any]) -> Job:
    observed = {int(n): float(x) for n, x in (e.get("observed") or {}).items()}
    return Job(
        namespace=str(e.get("namespace", "default")),
        name=str(e["name"]),
        worker=_resources(e.get("worker")),
        replicas=int(e.get("replicas", 0)),
        min_replicas=int(e.get("minReplicas", 1)),
        max_replicas=int(e.get("maxReplicas", 1)),
        weight=float(e.get("weight", 1.0)),
        min_marginal_speedup=float(e.get("minMarginalSpeedup", 0.05)),
        priority=int(e.get("priority", 0)),
        arrival=float(e.get("arrival", 0.0)),
        rescale_pause_s=float(e.get("rescalePauseSeconds", 0.0)),
        observed=observed,
        tolerations=_tolerations(e.get("tolerations")),
        node_selector=_labels(e.get("nodeSelector")),
    )
