"""Where pods and samples come from: a static file, Kubernetes + scraping, or Prometheus.

Every source fills the same two seams: the
:class:`~metrics_adapter.scraping.pod_registry.PodRegistry` (which
pods exist, their labels and owners) and the :class:`~metrics_adapter.scraping.store.MetricStore`
(their samples). The API never knows which source is running.
"""

from __future__ import annotations

from typing import Protocol


class Component(Protocol):
    """Something with a background lifecycle."""

    def start(self) -> None:
        """Start background work."""
        ...

    def stop(self) -> None:
        """Stop background work (bounded in time)."""
        ...
