"""Capacity sources and history stores by name: a new backend is one factory and one line here.

``--sizing-capacity`` and ``--sizing-history`` name an entry; the factory gets a
:class:`BackendContext` and imports what it needs (the Kubernetes client only when used).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edl_sizing.capacity import CapacitySource
from edl_sizing.history import HistoryStore, MemoryHistoryStore
from metrics_adapter.errors import ConfigError
from metrics_adapter.settings import AdapterSettings
from metrics_adapter.sizing.capacity_file import FileCapacitySource
from metrics_adapter.sizing.kube_objects import JobDefaults

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class BackendContext:
    """What a backend factory may use."""

    settings: AdapterSettings
    api_client: Callable[[], Any]
    """The adapter's Kubernetes client (made on first call)."""
    on_error: Callable[[str], None]
    """Counts a failure of the named component (``edl_adapter_source_errors_total``)."""


def _kubernetes_capacity(ctx: BackendContext) -> CapacitySource:
    from metrics_adapter.sizing.cluster_watch import KubernetesCapacitySource

    defaults = JobDefaults(max_workers=ctx.settings.sizing_default_max_workers)
    return KubernetesCapacitySource(
        ctx.api_client(),
        defaults,
        lambda kind: ctx.on_error(f"sizing-{kind}"),
        kueue=ctx.settings.sizing_kueue,
    )


def _static_capacity(ctx: BackendContext) -> CapacitySource:
    path = ctx.settings.sizing_capacity_file
    if path is None:
        raise ConfigError("--sizing-capacity static needs --sizing-capacity-file")
    try:
        return FileCapacitySource(path)
    except ValueError as e:
        raise ConfigError(str(e)) from e


FALLBACK_HISTORY_NAMESPACE = "edl-system"
"""The history ConfigMap's namespace when neither the flag nor the adapter's own says."""


def history_namespace(settings: AdapterSettings) -> str:
    """The history ConfigMap's namespace.

    The flag, else the adapter's own, else `FALLBACK_HISTORY_NAMESPACE`.
    """
    if settings.sizing_history_namespace:
        return settings.sizing_history_namespace
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or FALLBACK_HISTORY_NAMESPACE
    except OSError:
        return FALLBACK_HISTORY_NAMESPACE


def _configmap_history(ctx: BackendContext) -> HistoryStore:
    from metrics_adapter.sizing.history_configmap import ConfigMapHistoryStore

    s = ctx.settings
    return ConfigMapHistoryStore(ctx.api_client(), history_namespace(s), s.sizing_history_configmap)


def _memory_history(ctx: BackendContext) -> HistoryStore:
    return MemoryHistoryStore()


CAPACITY_SOURCES: dict[str, Callable[[BackendContext], CapacitySource]] = {
    "kubernetes": _kubernetes_capacity,
    "static": _static_capacity,
}
HISTORY_STORES: dict[str, Callable[[BackendContext], HistoryStore]] = {
    "configmap": _configmap_history,
    "memory": _memory_history,
}


def build(registry: dict[str, Callable[[BackendContext], Any]], name: str, what: str,
          ctx: BackendContext) -> Any:  # fmt: skip
    """The backend ``name`` of ``registry``.

    Raises:
        ConfigError: no backend of that name.
    """
    factory = registry.get(name)
    if factory is None:
        raise ConfigError(f"unknown {what} {name!r} (one of {', '.join(sorted(registry))})")
    return factory(ctx)


def check(settings: AdapterSettings) -> None:
    """Fail before serving: unknown backend names, a static source without a valid file.

    Raises:
        ConfigError: one line saying what is wrong.
    """
    for registry, name, what in (
        (CAPACITY_SOURCES, settings.sizing_capacity, "capacity source"),
        (HISTORY_STORES, settings.sizing_history, "history store"),
    ):
        if name not in registry:
            raise ConfigError(f"unknown {what} {name!r} (one of {', '.join(sorted(registry))})")
    if settings.sizing_capacity == "static":
        _static_capacity(BackendContext(settings, lambda: None, lambda _: None))
