"""Pod sources by name (``--source``): a new source is one file in this folder and one line here.

Each source module exports ``SOURCE``, a :class:`SourceDefinition`: ``check`` fails fast on
settings it cannot work with (before the server starts), ``build`` returns its background
components (discovery first, then collection) over the shared registry and store. A module is
imported when its source is used, so the Kubernetes client is loaded only by the sources that
need it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metrics_adapter.errors import ConfigError
from metrics_adapter.scraping.catalogue import CatalogueHolder
from metrics_adapter.scraping.pod_registry import PodRegistry
from metrics_adapter.scraping.sources import Component
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.selfmetrics import AdapterMetrics
from metrics_adapter.settings import AdapterSettings

SOURCES: dict[str, str] = {
    "static": "metrics_adapter.scraping.sources.static",
    "kubernetes": "metrics_adapter.scraping.sources.kubernetes",
    "prometheus": "metrics_adapter.scraping.sources.prometheus",
}
"""``--source`` name -> the module that defines it (its ``SOURCE``)."""


@dataclass(frozen=True)
class SourceContext:
    """What a source may use."""

    settings: AdapterSettings
    pods: PodRegistry
    """Which pods exist (the source keeps it current, or a static file does)."""
    store: MetricStore
    """Where their samples go."""
    catalogue: CatalogueHolder
    metrics: AdapterMetrics
    api_client: Callable[[], Any]
    """The adapter's Kubernetes client (made on first call)."""


@dataclass(frozen=True)
class SourceDefinition:
    """One source: its settings check and its components."""

    check: Callable[[AdapterSettings], None]
    """Raises :class:`ConfigError` (one line) on settings the source cannot work with."""
    build: Callable[[SourceContext], list[Component]]


def source(name: str) -> SourceDefinition:
    """The source named ``name``.

    Raises:
        ConfigError: no source of that name.
    """
    module = SOURCES.get(name)
    if module is None:
        raise ConfigError(f"unknown source {name!r} (one of {', '.join(sorted(SOURCES))})")
    definition = importlib.import_module(module).SOURCE
    if not isinstance(definition, SourceDefinition):
        raise TypeError(f"{module}.SOURCE is not a SourceDefinition")
    return definition
