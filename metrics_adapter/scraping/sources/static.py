"""StaticPodDiscovery: pods listed in a YAML file (tests and the demo, no cluster needed).

Format::

    pods:
      - namespace: ml
        name: trainer-0
        labels: {app: trainer}
        deployment: trainer        # owner Deployment (optional)
        replicaset: trainer-7d9f   # owner ReplicaSet (optional)
        node: node-1               # optional
        address: 127.0.0.1:9400    # host:port of the agent, or a full URL (optional)

The file is re-read when it changes; pods that disappear are dropped from the store.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from metrics_adapter.errors import ConfigError
from metrics_adapter.filewatch import FileWatcher
from metrics_adapter.kube.names import DNS1123_LABEL, DNS1123_SUBDOMAIN
from metrics_adapter.kube.selectors import validate_key, validate_value
from metrics_adapter.periodic import PeriodicTask
from metrics_adapter.scraping.pod_registry import OwnerRef, PodRegistry, PodTarget
from metrics_adapter.scraping.sources import Component
from metrics_adapter.scraping.sources.registry import SourceContext, SourceDefinition
from metrics_adapter.scraping.sources.scraper import scrape_url_for, scraper_for
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.settings import AdapterSettings

# libyaml's safe loader when present: 3x faster, a fraction of the memory on large files
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

log = logging.getLogger(__name__)

_KEYS = {
    "namespace",
    "name",
    "labels",
    "deployment",
    "replicaset",
    "statefulset",
    "node",
    "address",
    "url",
    "uid",
}


def load_static_pods(path: Path) -> list[PodTarget]:
    """Read and validate a static pods file.

    Raises:
        ConfigError: naming the file and the bad entry.
    """
    try:
        doc = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot load static pods file {path}: {e}") from e
    entries = (doc or {}).get("pods") if isinstance(doc, dict | type(None)) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected a mapping with a 'pods' list")
    return [_pod(e, f"{path}: pods[{i}]") for i, e in enumerate(entries)]


def _pod(entry: Any, where: str) -> PodTarget:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    namespace = str(entry.get("namespace", "default"))
    name = str(entry.get("name", ""))
    if not DNS1123_LABEL.match(namespace) or not DNS1123_SUBDOMAIN.match(name):
        raise ConfigError(f"{where}: invalid namespace/name {namespace!r}/{name!r}")
    labels = {str(k): str(v) for k, v in (entry.get("labels") or {}).items()}
    for k, v in labels.items():
        why = validate_key(k) or validate_value(v)
        if why:
            raise ConfigError(f"{where}: invalid label {k}={v}: {why}")
    owners: list[OwnerRef] = []
    if entry.get("replicaset"):
        owners.append(OwnerRef("ReplicaSet", "apps", str(entry["replicaset"])))
    if entry.get("deployment"):
        owners.append(OwnerRef("Deployment", "apps", str(entry["deployment"])))
    if entry.get("statefulset"):
        owners.append(OwnerRef("StatefulSet", "apps", str(entry["statefulset"])))
    url = entry.get("url") or (
        scrape_url_for(str(entry["address"])) if entry.get("address") else None
    )
    return PodTarget(
        namespace=namespace,
        name=name,
        labels=labels,
        owners=tuple(owners),
        node=str(entry["node"]) if entry.get("node") else None,
        scrape_url=str(url) if url else None,
        uid=str(entry.get("uid", "")),
    )


class StaticPodDiscovery:
    """Keeps the registry equal to the file's pods, re-reading it when it changes."""

    def __init__(
        self, path: Path, pods: PodRegistry, store: MetricStore, reload_interval: float = 1.0
    ) -> None:
        self._path = path
        self._pods = pods
        self._store = store
        self._watcher = FileWatcher(path)
        self._task = PeriodicTask("static-pods", reload_interval, self._reload_if_changed)

    def load(self) -> None:
        """Load the file now (raises ConfigError when invalid)."""
        self._watcher.prime()
        self._apply(load_static_pods(self._path))

    def _apply(self, targets: list[PodTarget]) -> None:
        for key in self._pods.replace_all(targets):
            self._store.drop(key)
        log.info("static pods: %d from %s", len(targets), self._path)

    def _reload_if_changed(self) -> None:
        if not self._watcher.changed():
            return
        try:
            self._apply(load_static_pods(self._path))
        except ConfigError as e:
            log.error("keeping the previous pods: %s", e)

    def start(self) -> None:
        """Watch the file for changes."""
        self._task.start()

    def stop(self) -> None:
        """Stop watching."""
        self._task.stop()


def _check(settings: AdapterSettings) -> None:
    if settings.static_file is None:
        raise ConfigError("--source static needs --static-file")


def _build(ctx: SourceContext) -> list[Component]:
    path = ctx.settings.static_file
    if path is None:
        raise ConfigError("--source static needs --static-file")
    return [static_discovery(ctx, path), scraper_for(ctx)]


def static_discovery(ctx: SourceContext, path: Path) -> StaticPodDiscovery:
    """The registry kept equal to the file's pods (loaded now: a bad file fails here)."""
    static = StaticPodDiscovery(path, ctx.pods, ctx.store, ctx.settings.reload_interval)
    static.load()
    return static


SOURCE = SourceDefinition(_check, _build)
"""``--source static``: the pods of ``--static-file``, scraped."""
