"""KubernetesPodDiscovery: trainer pods from a label-selected watch, owners resolved.

A pod is a scrape target while it is Running with a pod IP; its agent is at
``http://<podIP>:<port><path>`` where the port comes from the pod annotation
(``edl.paddlepaddle.org/metrics-port`` by default) or ``--metrics-port``. Owners are resolved
pod -> ReplicaSet -> Deployment (ReplicaSet lookups cached), so Object metrics on
``deployments.apps`` aggregate the Deployment's pods.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from metrics_adapter.scraping.pod_registry import OwnerRef, PodKey, PodRegistry, PodTarget
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.selfmetrics import AdapterMetrics

log = logging.getLogger(__name__)


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def pod_target(
    pod: Any, owners: tuple[OwnerRef, ...], port: int, port_annotation: str, path: str
) -> PodTarget | None:
    """A scrape target for a V1Pod, or None when it is not (yet / any more) scrapable."""
    meta, status = pod.metadata, pod.status
    if meta is None or meta.deletion_timestamp is not None or status is None:
        return None
    if status.phase != "Running" or not status.pod_ip:
        return None
    annotations = meta.annotations or {}
    try:
        port = int(annotations.get(port_annotation, port))
    except ValueError:
        log.warning("pod %s/%s: bad %s annotation", meta.namespace, meta.name, port_annotation)
    host = f"[{status.pod_ip}]" if ":" in status.pod_ip else status.pod_ip
    return PodTarget(
        namespace=meta.namespace,
        name=meta.name,
        labels=dict(meta.labels or {}),
        owners=owners,
        node=pod.spec.node_name if pod.spec is not None else None,
        scrape_url=f"http://{host}:{port}{path}",
        uid=meta.uid or "",
    )


class OwnerResolver:
    """Resolves a pod's controller chain; ReplicaSet -> Deployment lookups cached (TTL)."""

    def __init__(self, apps: Any, ttl: float = 300.0) -> None:
        self._apps = apps
        self._ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, OwnerRef | None]] = {}
        self._lock = threading.Lock()

    def owners(self, pod: Any) -> tuple[OwnerRef, ...]:
        """The pod's controller, and the controller's controller for a ReplicaSet."""
        refs = pod.metadata.owner_references or []
        controller = next((r for r in refs if r.controller), refs[0] if refs else None)
        if controller is None:
            return ()
        first = OwnerRef(
            controller.kind,
            _group_of(controller.api_version),
            controller.name,
            controller.uid or "",
        )
        if controller.kind != "ReplicaSet":
            return (first,)
        parent = self._replicaset_owner(pod.metadata.namespace, controller.name)
        return (first, parent) if parent else (first,)

    def _replicaset_owner(self, namespace: str, name: str) -> OwnerRef | None:
        key = (namespace, name)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
        if hit and hit[0] > now:
            return hit[1]
        owner: OwnerRef | None = None
        try:
            rs = self._apps.read_namespaced_replica_set(name, namespace, _request_timeout=10)
            for r in rs.metadata.owner_references or []:
                if r.controller:
                    owner = OwnerRef(r.kind, _group_of(r.api_version), r.name, r.uid or "")
        except Exception as e:
            log.warning("cannot resolve the owner of replicaset %s/%s: %s", namespace, name, e)
            return None
        with self._lock:
            self._cache[key] = (now + self._ttl, owner)
        return owner


class KubernetesPodDiscovery:
    """List + watch of trainer pods (official client), reconnecting with bounded backoff."""

    def __init__(
        self,
        api_client: Any,
        pods: PodRegistry,
        store: MetricStore,
        metrics: AdapterMetrics,
        label_selector: str,
        namespace: str | None,
        port: int,
        port_annotation: str,
        path: str = "/metrics",
        watch_timeout: int = 60,
    ) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._owners = OwnerResolver(k8s.AppsV1Api(api_client))
        self._pods = pods
        self._store = store
        self._metrics = metrics
        self._selector = label_selector
        self._namespace = namespace
        self._port = port
        self._annotation = port_annotation
        self._path = path
        self._watch_timeout = watch_timeout
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread: threading.Thread | None = None

    def _list_call(self) -> Any:
        if self._namespace:
            return self._core.list_namespaced_pod, {"namespace": self._namespace}
        return self._core.list_pod_for_all_namespaces, {}

    def _target(self, pod: Any) -> PodTarget | None:
        return pod_target(pod, self._owners.owners(pod), self._port, self._annotation, self._path)

    def relist(self) -> str:
        """List all matching pods into the registry; returns the list's resourceVersion."""
        fn, kwargs = self._list_call()
        result = fn(label_selector=self._selector, _request_timeout=30, **kwargs)
        targets = [t for t in (self._target(p) for p in result.items) if t is not None]
        for key in self._pods.replace_all(targets):
            self._store.drop(key)
        log.info("kubernetes: %d trainer pods match %r", len(targets), self._selector)
        return str(result.metadata.resource_version)

    def apply_event(self, event_type: str, pod: Any) -> None:
        """Apply one watch event to the registry."""
        target = None if event_type == "DELETED" else self._target(pod)
        if target is None:
            key = PodKey(pod.metadata.namespace, pod.metadata.name)
            self._pods.remove(key)
            self._store.drop(key)
        else:
            self._pods.upsert(target)

    def _run(self) -> None:
        backoff = 1.0
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self.relist()
                fn, kwargs = self._list_call()
                self._watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(
                    fn,
                    label_selector=self._selector,
                    resource_version=resource_version,
                    timeout_seconds=self._watch_timeout,
                    _request_timeout=self._watch_timeout + 10,
                    **kwargs,
                ):
                    if self._stop.is_set():
                        break
                    kind = event.get("type")
                    obj = event.get("object")
                    if kind == "ERROR":
                        resource_version = None  # 410 Gone or similar: relist
                        break
                    if kind in ("ADDED", "MODIFIED", "DELETED") and obj is not None:
                        self.apply_event(kind, obj)
                        resource_version = obj.metadata.resource_version
                backoff = 1.0
            except Exception as e:
                if self._stop.is_set():
                    return
                self._metrics.source_errors.labels("kubernetes").inc()
                log.warning("kubernetes pod watch failed (%s); retrying in %.0fs", e, backoff)
                resource_version = None
                self._stop.wait(backoff)
                backoff = min(30.0, backoff * 2)

    def start(self) -> None:
        """Start the list/watch thread."""
        self._thread = threading.Thread(target=self._run, name="kube-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (bounded wait)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(2.0)
