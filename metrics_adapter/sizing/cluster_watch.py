"""The Kubernetes capacity source: watches of the objects a sizing round reads.

Each kind has a `metrics_adapter.kube.reflector.Reflector` (one thread: list, watch, resync,
backoff) filling a `RecordStore` of the compact records of
:mod:`metrics_adapter.sizing.kube_objects` (the pods a `PodView`, which also keeps each
pod's attribution to its job from one round to the next: a round redoes only the pods
whose events came since the last; with Kueue the pods are attributed every round), so
memory grows with what the sizer reads, not with the objects' size; what records have in
common (namespaces, node names, request shapes, label sets) is kept once per kind
(`SharedValues`). `WATCHED` is the table of kinds:
a new kind is one row there and one argument of `assemble`. Deployments are watched with
the job label as selector; the rest cluster-wide (RBAC: get/list/watch on nodes, pods,
priorityclasses, deployments, resourcequotas). With ``kueue`` (``--sizing-kueue``), also
Kueue's ClusterQueues, LocalQueues and the Workloads that hold quota (`KUEUE_WATCHED`;
RBAC: list/watch on ``kueue.x-k8s.io`` clusterqueues, localqueues, workloads).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from edl_sizing.capacity import ClusterSnapshot
from edl_sizing.cluster import Node, Quota
from metrics_adapter.kube.reflector import RecordStore, Reflector
from metrics_adapter.kube.shared_values import SharedValues
from metrics_adapter.sizing.kube_objects import (
    JOB_LABEL,
    DeploymentRecord,
    JobDefaults,
    PodRecord,
    PriorityClassRecord,
    assemble,
    decode_pod_list,
    deployment_from,
    node_from,
    pod_from,
    priority_class_from,
    quota_from,
)
from metrics_adapter.sizing.kueue_objects import (
    GROUP,
    VERSION,
    ClusterQueueRecord,
    LocalQueueRecord,
    WaitingWorkload,
    WorkloadRecord,
    cluster_queue_from,
    cluster_queues_of,
    holding_pods,
    local_queue_from,
    with_workloads,
    workload_from,
)
from metrics_adapter.sizing.pod_view import PodView


@dataclass(frozen=True)
class WatchedKind:
    """One row of `WATCHED`: a kind, how to list it, what record to keep of each object."""

    kind: str
    list_fn: Callable[[Any], Callable[..., Any]]
    """The client's list function, from an ``ApiClient``."""
    convert: Callable[[dict[str, Any], SharedValues], Any]
    """Object JSON -> record, or None when the object does not count (values the records
    have in common are taken from the watch's `SharedValues`)."""
    label_selector: str | None = None
    ordered: bool = False
    """Records kept in key order (`RecordStore`): a round then sorts nothing."""
    decode: Callable[[bytes], Any] | None = None
    """A list page's JSON -> only what `convert` reads (None: all of it)."""


WATCHED: tuple[WatchedKind, ...] = (
    WatchedKind("nodes", lambda api: k8s.CoreV1Api(api).list_node, lambda o, _: node_from(o)),
    WatchedKind(
        "pods",
        lambda api: k8s.CoreV1Api(api).list_pod_for_all_namespaces,
        pod_from,
        ordered=True,
        decode=decode_pod_list,
    ),
    WatchedKind(
        "deployments",
        lambda api: k8s.AppsV1Api(api).list_deployment_for_all_namespaces,
        lambda o, _: deployment_from(o),
        JOB_LABEL,
    ),
    WatchedKind(
        "priorityclasses",
        lambda api: k8s.SchedulingV1Api(api).list_priority_class,
        lambda o, _: priority_class_from(o),
    ),
    WatchedKind(
        "resourcequotas",
        lambda api: k8s.CoreV1Api(api).list_resource_quota_for_all_namespaces,
        lambda o, _: quota_from(o),
    ),
)
"""Every kind the sizer reads, by the name `KubernetesCapacitySource.records` takes."""


def _kueue_list(plural: str) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: functools.partial(
        k8s.CustomObjectsApi(api).list_cluster_custom_object, GROUP, VERSION, plural
    )


KUEUE_WATCHED: tuple[WatchedKind, ...] = (
    WatchedKind("clusterqueues", _kueue_list("clusterqueues"), lambda o, _: cluster_queue_from(o)),
    WatchedKind("localqueues", _kueue_list("localqueues"), lambda o, _: local_queue_from(o)),
    WatchedKind("workloads", _kueue_list("workloads"), lambda o, _: workload_from(o)),
)
"""Kueue's queues, read when the adapter runs with ``--sizing-kueue``."""


class KubernetesCapacitySource:
    """The cluster as the sizer sees it, from five watches (eight with Kueue's)."""

    def __init__(
        self,
        api_client: Any,
        defaults: JobDefaults | None = None,
        on_error: Callable[[str], None] = lambda _: None,
        watch_timeout_s: int = 60,
        kueue: bool = False,
    ) -> None:
        self._defaults = defaults or JobDefaults()
        self._kueue = kueue
        self._stores: dict[str, RecordStore[Any] | PodView] = {}
        self._reflectors: list[Reflector] = []
        for row in WATCHED + (KUEUE_WATCHED if kueue else ()):
            convert = _with_shared(row.convert, SharedValues())
            store: RecordStore[Any] | PodView = (
                PodView(convert)
                if row.kind == "pods"
                else RecordStore(convert, ordered=row.ordered)
            )
            selector = {"label_selector": row.label_selector} if row.label_selector else {}
            self._stores[row.kind] = store
            self._reflectors.append(
                Reflector(
                    row.kind,
                    row.list_fn(api_client),
                    store,
                    selector,
                    on_error,
                    watch_timeout_s=watch_timeout_s,
                    decode=row.decode or json.loads,
                )
            )

    def records(self, kind: str) -> list[Any]:
        """The current records of one `WATCHED` kind."""
        return self._stores[kind].records()

    @property
    def synced(self) -> bool:
        """Every watch has completed its first list."""
        return all(r.synced for r in self._reflectors)

    def snapshot(self) -> ClusterSnapshot | None:
        """The cluster now; None until every watch has listed once."""
        if not self.synced:
            return None
        nodes: list[Node] = self.records("nodes")
        deployments: list[DeploymentRecord] = self.records("deployments")
        classes: list[PriorityClassRecord] = self.records("priorityclasses")
        quotas: list[Quota] = self.records("resourcequotas")
        if not self._kueue:
            pod_view = self._stores["pods"]
            assert isinstance(pod_view, PodView)
            return assemble(
                nodes, (), deployments, classes, self._defaults, quotas,
                attributed=pod_view.attributed(deployments),
            )  # fmt: skip
        pods: list[PodRecord] = self.records("pods")
        cluster_queues: list[ClusterQueueRecord] = self.records("clusterqueues")
        local_queues: list[LocalQueueRecord] = self.records("localqueues")
        workloads: list[WorkloadRecord | WaitingWorkload] = self.records("workloads")
        return assemble(
            nodes,
            pods,
            deployments,
            classes,
            self._defaults,
            quotas,
            pods_in_key_order=True,
            queues=with_workloads(
                cluster_queues,
                workloads,
                {f"{r.pod.namespace}/{r.pod.name}" for r in pods if not r.releasing},
            ),
            waiting=[w for w in workloads if isinstance(w, WaitingWorkload)],
            local_queues=cluster_queues_of(local_queues),
            holding=holding_pods(workloads),
        )

    def deployments_by_job(self) -> dict[str, DeploymentRecord]:
        """The trainer Deployments by job key (``namespace/name``), for Events: one pass."""
        deployments: list[DeploymentRecord] = self.records("deployments")
        return {f"{d.namespace}/{d.name}": d for d in deployments}

    def start(self) -> None:
        """Start the watches."""
        for r in self._reflectors:
            r.start()

    def stop(self) -> None:
        """Stop them."""
        for r in self._reflectors:
            r.stop()


def _with_shared(
    convert: Callable[[dict[str, Any], SharedValues], Any], shared: SharedValues
) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: convert(obj, shared)
