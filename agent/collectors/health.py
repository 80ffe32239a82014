"""Self-monitoring of the agent's collectors: how long each took, how often each failed.

A collector that raises must not take the whole scrape down with it: `GuardedCollector` runs
it, keeps what it yielded only if it finished, and counts the failure instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


class CollectorHealth:
    """Error counts and last durations per collector name; shared by the guarded collectors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}
        self._durations: dict[str, float] = {}

    def register(self, name: str) -> None:
        """Makes `name` appear (with zero errors) before its first failure."""
        with self._lock:
            self._errors.setdefault(name, 0)
            self._durations.setdefault(name, 0.0)

    def record_error(self, name: str, count: int = 1) -> None:
        """Counts `count` errors of collector `name`."""
        with self._lock:
            self._errors[name] = self._errors.get(name, 0) + count

    def record_duration(self, name: str, seconds: float) -> None:
        """Remembers how long the last collection of `name` took."""
        with self._lock:
            self._durations[name] = seconds

    def errors(self, name: str) -> int:
        """Errors counted so far for `name`."""
        with self._lock:
            return self._errors.get(name, 0)

    def copy(self) -> tuple[dict[str, int], dict[str, float]]:
        """Errors and durations, copied under the lock."""
        with self._lock:
            return dict(self._errors), dict(self._durations)


class GuardedCollector(Collector):
    """Wraps `inner`, timing it and turning an exception into an error count."""

    def __init__(
        self,
        name: str,
        inner: Collector,
        health: CollectorHealth,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._name = name
        self._inner = inner
        self._health = health
        self._clock = clock
        health.register(name)

    def collect(self) -> Iterable[Metric]:
        """Yields the inner collector's metrics, or nothing if it failed."""
        t0 = self._clock()
        try:
            metrics = list(self._inner.collect())
        except Exception as e:
            log.warning("collector %s failed: %s", self._name, e)
            self._health.record_error(self._name)
            metrics = []
        self._health.record_duration(self._name, self._clock() - t0)
        return metrics


class HealthCollector(Collector):
    """Exports `edl_agent_collector_errors_total` and `..._duration_seconds` per collector."""

    def __init__(self, health: CollectorHealth) -> None:
        self._health = health

    def collect(self) -> Iterable[Metric]:
        """Yields the two self-monitoring families."""
        errors, durations = self._health.copy()
        err = CounterMetricFamily(
            "edl_agent_collector_errors_total",
            "Errors while collecting metrics, per agent collector.",
            labels=["collector"],
        )
        dur = GaugeMetricFamily(
            "edl_agent_collector_duration_seconds",
            "Wall time of the last collection, per agent collector.",
            labels=["collector"],
        )
        for name in sorted(errors):
            err.add_metric([name], errors[name])
        for name in sorted(durations):
            dur.add_metric([name], durations[name])
        return [err, dur]
