"""MetricStore: bounded windows of samples per (pod, series), with staleness expiry."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from metrics_adapter.pods import PodKey
from metrics_adapter.window import MetricWindow

LabelSet = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One scraped sample of one series."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None


@dataclass
class _PodSeries:
    windows: dict[str, dict[LabelSet, MetricWindow]] = field(default_factory=dict)
    last_ingest: float = 0.0
    memo: dict[Hashable, object] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreStats:
    """Size figures of the store (exported as the adapter's own metrics)."""

    pods: int
    series: int
    samples: int
    bytes: int


class MetricStore:
    """Samples per pod and series, bounded in count (ring windows) and in age (expiry).

    Args:
        capacity: samples kept per series (oldest dropped first).
        expire_after: seconds after its newest sample that a pod's data is dropped.
        clock: wall-clock seconds (injected for tests).
    """

    def __init__(self, capacity: int, expire_after: float, clock: Callable[[], float]) -> None:
        self._capacity = max(2, capacity)
        self.expire_after = expire_after
        self._clock = clock
        self._lock = threading.RLock()
        self._pods: dict[PodKey, _PodSeries] = {}

    def ingest(
        self, pod: PodKey, samples: Iterable[Sample], keep: Callable[[str], bool] | None = None
    ) -> int:
        """Add one scrape's samples for a pod; returns how many were stored.

        Samples without a timestamp get the ingest time; NaN and infinite values are dropped,
        as are series ``keep`` rejects.
        """
        now = self._clock()
        stored = 0
        with self._lock:
            entry = self._pods.get(pod)
            if entry is None:
                entry = self._pods[pod] = _PodSeries()
            for s in samples:
                if keep is not None and not keep(s.name):
                    continue
                if not math.isfinite(s.value):
                    continue
                by_labels = entry.windows.get(s.name)
                if by_labels is None:
                    by_labels = entry.windows[s.name] = {}
                label_set = tuple(sorted(s.labels.items()))
                window = by_labels.get(label_set)
                if window is None:
                    window = by_labels[label_set] = MetricWindow(self._capacity)
                ts = now if s.timestamp is None else s.timestamp
                if window.add(ts, s.value):
                    stored += 1
            entry.last_ingest = now
            entry.memo.clear()
        return stored

    def windows(self, pod: PodKey, series: str) -> list[tuple[LabelSet, MetricWindow]]:
        """The windows of one series of one pod (empty when unknown)."""
        with self._lock:
            entry = self._pods.get(pod)
            if entry is None:
                return []
            return list(entry.windows.get(series, {}).items())

    def memoized(self, pod: PodKey, key: Hashable, compute: Callable[[], object]) -> object:
        """Return ``compute()`` cached until the pod's next ingest."""
        with self._lock:
            entry = self._pods.get(pod)
            if entry is None:
                return compute()
            if key in entry.memo:
                return entry.memo[key]
            value = entry.memo[key] = compute()
            return value

    def last_ingest(self, pod: PodKey) -> float | None:
        """When the pod's data last arrived (None when it has none)."""
        with self._lock:
            entry = self._pods.get(pod)
            return entry.last_ingest if entry else None

    def drop(self, pod: PodKey) -> None:
        """Forget a pod (deleted, or no longer a target)."""
        with self._lock:
            self._pods.pop(pod, None)

    def expire(self) -> list[PodKey]:
        """Drop pods whose newest data is older than ``expire_after``; returns them."""
        horizon = self._clock() - self.expire_after
        with self._lock:
            gone = [k for k, e in self._pods.items() if e.last_ingest < horizon]
            for k in gone:
                del self._pods[k]
        return gone

    def pods(self) -> list[PodKey]:
        """Pods with data."""
        with self._lock:
            return list(self._pods)

    def stats(self) -> StoreStats:
        """Count pods, series, samples and approximate bytes."""
        with self._lock:
            series = samples = nbytes = 0
            for entry in self._pods.values():
                nbytes += 200
                for by_labels in entry.windows.values():
                    nbytes += 100
                    for label_set, w in by_labels.items():
                        series += 1
                        samples += w.size
                        nbytes += w.nbytes() + 64 + 100 * len(label_set)
            return StoreStats(len(self._pods), series, samples, nbytes)
