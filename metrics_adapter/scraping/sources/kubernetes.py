"""KubernetesPodDiscovery: trainer pods from a label-selected watch, owners resolved.

The list/watch is a `metrics_adapter.kube.reflector.Reflector`; pods are read as their JSON.
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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client as k8s

from metrics_adapter.errors import ConfigError, SourceError
from metrics_adapter.kube.client import make_api_client
from metrics_adapter.kube.reflector import KubeObject, Reflector
from metrics_adapter.scraping.pod_registry import OwnerRef, PodKey, PodRegistry, PodTarget
from metrics_adapter.scraping.sources import Component
from metrics_adapter.scraping.sources.registry import SourceContext, SourceDefinition
from metrics_adapter.scraping.sources.scraper import scraper_for
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.selfmetrics import AdapterMetrics
from metrics_adapter.settings import AdapterSettings

log = logging.getLogger(__name__)


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _key(pod: Mapping[str, Any]) -> PodKey:
    meta = pod.get("metadata") or {}
    return PodKey(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def pod_target(
    pod: Mapping[str, Any], owners: tuple[OwnerRef, ...], port: int, port_annotation: str, path: str
) -> PodTarget | None:
    """A scrape target for a pod's JSON, or None when it is not (yet / any more) scrapable."""
    meta, status = pod.get("metadata"), pod.get("status")
    if not meta or meta.get("deletionTimestamp") or not status:
        return None
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip:
        return None
    namespace, name = _key(pod)
    annotations = meta.get("annotations") or {}
    try:
        port = int(annotations.get(port_annotation, port))
    except ValueError:
        log.warning("pod %s/%s: bad %s annotation", namespace, name, port_annotation)
    host = f"[{ip}]" if ":" in ip else ip
    return PodTarget(
        namespace=namespace,
        name=name,
        labels=dict(meta.get("labels") or {}),
        owners=owners,
        node=(pod.get("spec") or {}).get("nodeName"),
        scrape_url=f"http://{host}:{port}{path}",
        uid=meta.get("uid") or "",
    )


class OwnerResolver:
    """Resolves a pod's controller chain; ReplicaSet -> Deployment lookups cached (TTL)."""

    def __init__(self, apps: Any, ttl: float = 300.0) -> None:
        self._apps = apps
        self._ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, OwnerRef | None]] = {}
        self._lock = threading.Lock()

    def owners(self, pod: Mapping[str, Any]) -> tuple[OwnerRef, ...]:
        """The pod's controller, and the controller's controller for a ReplicaSet."""
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        controller = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if controller is None:
            return ()
        kind, name = str(controller.get("kind") or ""), str(controller.get("name") or "")
        first = OwnerRef(
            kind,
            _group_of(str(controller.get("apiVersion") or "")),
            name,
            controller.get("uid") or "",
        )
        if kind != "ReplicaSet":
            return (first,)
        parent = self._replicaset_owner(_key(pod).namespace, name)
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
    """Trainer pods from a `Reflector` (list + watch, bounded backoff) into the registry."""

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
        kwargs: dict[str, Any] = {"label_selector": label_selector}
        list_fn: Callable[..., Any]
        if namespace:
            kwargs["namespace"] = namespace
            list_fn = self._core.list_namespaced_pod
        else:
            list_fn = self._core.list_pod_for_all_namespaces
        self._reflector = Reflector(
            "kubernetes", list_fn, self, kwargs, self._count_error, watch_timeout_s=watch_timeout
        )

    def _count_error(self, _kind: str) -> None:
        self._metrics.source_errors.labels("kubernetes").inc()

    def _target(self, pod: Mapping[str, Any]) -> PodTarget | None:
        return pod_target(pod, self._owners.owners(pod), self._port, self._annotation, self._path)

    def replace(self, objects: Iterable[KubeObject]) -> None:
        """All matching pods (after a list) into the registry."""
        targets = [t for t in (self._target(p) for p in objects) if t is not None]
        for key in self._pods.replace_all(targets):
            self._store.drop(key)
        log.info("kubernetes: %d trainer pods match %r", len(targets), self._selector)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        """Apply one watch event to the registry."""
        target = None if event_type == "DELETED" else self._target(obj)
        if target is None:
            key = _key(obj)
            self._pods.remove(key)
            self._store.drop(key)
        else:
            self._pods.upsert(target)

    def start(self) -> None:
        """Start the list/watch thread."""
        self._reflector.start()

    def stop(self) -> None:
        """Stop watching (bounded wait)."""
        self._reflector.stop()


def _check(settings: AdapterSettings) -> None:
    try:
        make_api_client(settings.kubeconfig)
    except SourceError as e:
        raise ConfigError(f"--source kubernetes needs a cluster: {e}") from e


def _build(ctx: SourceContext) -> list[Component]:
    s = ctx.settings
    discovery = KubernetesPodDiscovery(
        ctx.api_client(),
        ctx.pods,
        ctx.store,
        ctx.metrics,
        label_selector=s.pod_selector,
        namespace=s.namespace,
        port=s.metrics_port,
        port_annotation=s.metrics_port_annotation,
        path=s.metrics_path,
    )
    return [discovery, scraper_for(ctx)]


SOURCE = SourceDefinition(_check, _build)
"""``--source kubernetes``: trainer pods watched through the API, each pod's agent scraped."""
