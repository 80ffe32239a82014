"""The Kubernetes capacity source: watches of the objects a sizing round reads.

Nodes, Pods, PriorityClasses, trainer Deployments and ResourceQuotas.
Each kind has a :class:`Reflector` (one thread): a paged list, then a watch from its
resourceVersion, relisting on ``410 Gone`` and after errors (bounded backoff). Objects are
read as plain JSON and kept only as the compact records of
:mod:`metrics_adapter.sizing.kube_objects`, so memory grows with what the sizer reads,
not with the objects' size. Deployments are watched with the job label as selector; pods
and nodes cluster-wide (RBAC: get/list/watch on nodes, pods, priorityclasses,
deployments, resourcequotas).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from kubernetes import client as k8s

from edl_sizing.capacity import ClusterSnapshot
from edl_sizing.cluster import Node, Quota
from metrics_adapter.sizing.kube_objects import (
    JOB_LABEL,
    DeploymentRecord,
    JobDefaults,
    PodRecord,
    PriorityClassRecord,
    assemble,
    deployment_from,
    node_from,
    pod_from,
    priority_class_from,
    quota_from,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


def _lines(resp: Any) -> Iterator[str]:
    """The watch stream's lines (one JSON event each)."""
    buffer = bytearray()
    for segment in resp.stream(amt=None, decode_content=False):
        buffer.extend(segment if isinstance(segment, bytes) else str(segment).encode())
        while (end := buffer.find(b"\n")) != -1:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if line.strip():
                yield line.decode("utf-8", errors="replace")


class Reflector(Generic[T]):
    """Keeps ``key -> record`` for one resource kind in step with the API server.

    Args:
        kind: a name for logs and error counts (``nodes``, ``pods``...).
        list_fn: the client's list function (``CoreV1Api.list_node`` ...).
        convert: object JSON -> record, or None when the object does not count.
        on_error: called with ``kind`` on every failed list or watch.
    """

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        convert: Callable[[dict[str, Any]], T | None],
        on_error: Callable[[str], None] = lambda _: None,
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_s: int = 60,
    ) -> None:
        self.kind = kind
        self._list = list_fn
        self._convert = convert
        self._on_error = on_error
        self._selector = {"label_selector": label_selector} if label_selector else {}
        self._page = page_size
        self._watch_timeout = watch_timeout_s
        self._records: dict[str, T] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None
        self.synced = False

    def records(self) -> list[T]:
        """The current records (a snapshot)."""
        with self._lock:
            return list(self._records.values())

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def relist(self) -> str:
        """List everything (in pages) into the records; returns the resourceVersion."""
        fresh: dict[str, T] = {}
        token: str | None = None
        version = ""
        for _ in range(100_000):
            kwargs: dict[str, Any] = {"limit": self._page, **self._selector}
            if token:
                kwargs["_continue"] = token
            resp = self._list(_preload_content=False, _request_timeout=60, **kwargs)
            body = json.loads(resp.data)
            for obj in body.get("items") or []:
                record = self._convert(obj)
                if record is not None:
                    fresh[self._key(obj)] = record
            meta = body.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            self._records = fresh
        self.synced = True
        return version

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        key = self._key(obj)
        record = None if event_type == "DELETED" else self._convert(obj)
        with self._lock:
            if record is None:
                self._records.pop(key, None)
            else:
                self._records[key] = record

    def _watch(self, version: str) -> str | None:
        """Watch from ``version`` until the server ends the stream; None: relist needed."""
        resp = self._list(
            watch=True,
            resource_version=version,
            timeout_seconds=self._watch_timeout,
            allow_watch_bookmarks=True,
            _preload_content=False,
            _request_timeout=self._watch_timeout + 10,
            **self._selector,
        )
        self._resp = resp
        try:
            for line in _lines(resp):
                if self._stop.is_set():
                    return version
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None  # 410 Gone (or worse): start over from a list
                new_version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.apply(kind, obj)
                if new_version:
                    version = str(new_version)
        finally:
            resp.release_conn()
        return version

    def _run(self) -> None:
        backoff = 1.0
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self.relist()
                version = self._watch(version)
                backoff = 1.0
            except Exception as e:
                if self._stop.is_set():
                    return
                self._on_error(self.kind)
                log.warning(
                    "sizing: %s watch failed (%s); retrying in %.0fs", self.kind, e, backoff
                )
                version = None
                self._stop.wait(backoff)
                backoff = min(30.0, backoff * 2)

    def start(self) -> None:
        """Start the list/watch thread."""
        self._thread = threading.Thread(target=self._run, name=f"sizing-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop (bounded wait; the thread is a daemon)."""
        self._stop.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.close()
            except Exception:
                pass
        if self._thread is not None:
            self._thread.join(2.0)


class KubernetesCapacitySource:
    """The cluster as the sizer sees it, from five watches."""

    def __init__(
        self,
        api_client: Any,
        defaults: JobDefaults | None = None,
        on_error: Callable[[str], None] = lambda _: None,
        watch_timeout_s: int = 60,
    ) -> None:
        core = k8s.CoreV1Api(api_client)
        apps = k8s.AppsV1Api(api_client)
        scheduling = k8s.SchedulingV1Api(api_client)
        self._defaults = defaults or JobDefaults()
        t = watch_timeout_s
        self.nodes: Reflector[Node] = Reflector(
            "nodes", core.list_node, node_from, on_error, None, 500, t
        )
        self.pods: Reflector[PodRecord] = Reflector(
            "pods", core.list_pod_for_all_namespaces, pod_from, on_error, None, 500, t
        )
        self.deployments: Reflector[DeploymentRecord] = Reflector(
            "deployments", apps.list_deployment_for_all_namespaces, deployment_from, on_error,
            JOB_LABEL, 500, t,
        )  # fmt: skip
        self.classes: Reflector[PriorityClassRecord] = Reflector(
            "priorityclasses", scheduling.list_priority_class, priority_class_from, on_error, None,
            500, t,
        )  # fmt: skip
        self.quotas: Reflector[Quota] = Reflector(
            "resourcequotas", core.list_resource_quota_for_all_namespaces, quota_from, on_error,
            None, 500, t,
        )  # fmt: skip
        self._all = (self.nodes, self.pods, self.deployments, self.classes, self.quotas)

    @property
    def synced(self) -> bool:
        """Every watch has completed its first list."""
        return all(r.synced for r in self._all)

    def snapshot(self) -> ClusterSnapshot | None:
        """The cluster now; None until every watch has listed once."""
        if not self.synced:
            return None
        return assemble(
            self.nodes.records(),
            self.pods.records(),
            self.deployments.records(),
            self.classes.records(),
            self._defaults,
            self.quotas.records(),
        )

    def deployment(self, job_key: str) -> DeploymentRecord | None:
        """The trainer Deployment behind a job key (for Events)."""
        namespace, _, name = job_key.partition("/")
        for d in self.deployments.records():
            if d.namespace == namespace and d.name == name:
                return d
        return None

    def start(self) -> None:
        """Start the watches."""
        for r in self._all:
            r.start()

    def stop(self) -> None:
        """Stop them."""
        for r in self._all:
            r.stop()
