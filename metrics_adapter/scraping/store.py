"""MetricStore: bounded windows of samples per (pod, series), with staleness expiry.

Bounded three ways against a hostile pod or reader: samples per series (ring windows), series
per pod (``max_series_per_pod``: new label sets beyond it are refused, counted and logged;
label sets not seen for ``prune_after`` are dropped), and memoized values per pod
(``MEMO_ENTRIES_PER_POD``: distinct ``metricLabelSelector`` texts cannot grow it).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from metrics_adapter.scraping.pod_registry import PodKey
from metrics_adapter.scraping.window import MetricWindow

log = logging.getLogger(__name__)

LabelSet = tuple[tuple[str, str], ...]

MEMO_ENTRIES_PER_POD = 64
"""Memoized values kept per pod; a new one beyond this empties the pod's memo first."""
_REFUSAL_LOG_INTERVAL = 300.0


@dataclass(frozen=True)
class Sample:
    """One scraped sample of one series."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None


@dataclass(slots=True)
class _PodSeries:
    # One flat dict per pod, keyed by (series name, label set): a pod has a handful of series,
    # and a dict per series name cost more memory than the samples themselves.
    windows: dict[tuple[str, LabelSet], MetricWindow] = field(default_factory=dict)
    last_ingest: float = 0.0
    memo: dict[Hashable, object] = field(default_factory=dict)
    last_prune: float = 0.0


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
        max_series_per_pod: label sets kept per pod; new ones beyond are refused.
        prune_after: seconds after its newest sample that one label set is dropped
            (None: never, only the whole pod expires).
        on_refused: told how many new label sets were refused (the adapter counts them).
    """

    def __init__(
        self,
        capacity: int,
        expire_after: float,
        clock: Callable[[], float],
        max_series_per_pod: int = 500,
        prune_after: float | None = None,
        on_refused: Callable[[int], None] | None = None,
    ) -> None:
        self._capacity = max(2, capacity)
        self.expire_after = expire_after
        self._clock = clock
        self.max_series_per_pod = max(1, max_series_per_pod)
        self._prune_after = prune_after
        self._on_refused = on_refused
        self._lock = threading.RLock()
        self._pods: dict[PodKey, _PodSeries] = {}
        self._refusals_logged: dict[PodKey, float] = {}
        """When each refusing pod was last logged, apart from its data: a pod whose every
        scrape is refused whole has none, and its entry expired and took the time along (the
        warning came every expiry, ~75 s, not every 300 s). Entries older than the interval
        are dropped, so this holds only pods logged in the last 300 s."""
        self._changes = 0

    @property
    def changes(self) -> int:
        """A count that moves whenever any pod's data changes (ingest, drop, expiry).

        Answers derived from the store stay valid while it stands still.
        """
        return self._changes

    def ingest(
        self, pod: PodKey, samples: Iterable[Sample], keep: Callable[[str], bool] | None = None
    ) -> int:
        """Add one scrape's samples for a pod; returns how many were stored.

        Samples without a timestamp get the ingest time; NaN and infinite values are dropped,
        as are series ``keep`` rejects and new label sets beyond ``max_series_per_pod``.
        """
        now = self._clock()
        stored = refused = 0
        with self._lock:
            entry = self._pods.get(pod)
            if entry is None:
                entry = self._pods[pod] = _PodSeries()
            self._prune(entry, now)
            windows = entry.windows
            for s in samples:
                if keep is not None and not keep(s.name):
                    continue
                if not math.isfinite(s.value):
                    continue
                key = (s.name, tuple(sorted(s.labels.items())) if s.labels else ())
                window = windows.get(key)
                if window is None:
                    if len(windows) >= self.max_series_per_pod:
                        refused += 1
                        continue
                    window = windows[key] = MetricWindow(self._capacity)
                ts = now if s.timestamp is None else s.timestamp
                if window.add(ts, s.value):
                    stored += 1
            entry.last_ingest = now
            entry.memo.clear()
            self._changes += 1
            if refused:
                self._refused(pod, refused, now)
        return stored

    def refuse(self, pod: PodKey, count: int) -> None:
        """Count and log ``count`` label sets of ``pod`` refused before ingest.

        That is a scrape that alone exceeds ``max_series_per_pod``; nothing of it is stored.
        """
        with self._lock:
            self._refused(pod, count, self._clock())

    def _refused(self, pod: PodKey, count: int, now: float) -> None:
        if self._on_refused is not None:
            self._on_refused(count)
        logged = self._refusals_logged
        if now - logged.get(pod, -math.inf) < _REFUSAL_LOG_INTERVAL:
            return
        for key in [k for k, t in logged.items() if now - t >= _REFUSAL_LOG_INTERVAL]:
            del logged[key]
        logged[pod] = now
        log.warning(
            "pod %s/%s exceeds the series cap (%d label sets, --max-series-per-pod): "
            "refused %d new label sets (logged at most every %.0f s)",
            pod.namespace,
            pod.name,
            self.max_series_per_pod,
            count,
            _REFUSAL_LOG_INTERVAL,
        )

    def _prune(self, entry: _PodSeries, now: float) -> None:
        """Drop label sets whose newest sample is older than ``prune_after``.

        Runs at most every half of it: the scan is linear in the pod's series.
        """
        after = self._prune_after
        if after is None or now - entry.last_prune < after / 2:
            return
        entry.last_prune = now
        horizon = now - after
        stale = [k for k, w in entry.windows.items() if w.last_time < horizon]
        for k in stale:
            del entry.windows[k]

    def windows(self, pod: PodKey, series: str) -> list[tuple[LabelSet, MetricWindow]]:
        """The windows of one series of one pod (empty when unknown)."""
        with self._lock:
            entry = self._pods.get(pod)
            if entry is None:
                return []
            return [(k[1], w) for k, w in entry.windows.items() if k[0] == series]

    def memoized(self, pod: PodKey, key: Hashable, compute: Callable[[], object]) -> object:
        """Return ``compute()`` cached until the pod's next ingest."""
        with self._lock:
            entry = self._pods.get(pod)
            if entry is None:
                return compute()
            memo = entry.memo
            if key in memo:
                return memo[key]
            if len(memo) >= MEMO_ENTRIES_PER_POD:
                memo.clear()
            value = memo[key] = compute()
            return value

    def memoized_batch(
        self, pods: Sequence[PodKey], key: Hashable, compute: Callable[[PodKey], object]
    ) -> list[object]:
        """``memoized`` for many pods under one lock hold; None for pods without data."""
        out: list[object] = []
        append = out.append
        with self._lock:
            get = self._pods.get
            for pod in pods:
                entry = get(pod)
                if entry is None:
                    append(None)
                    continue
                memo = entry.memo
                if key in memo:
                    append(memo[key])
                else:
                    if len(memo) >= MEMO_ENTRIES_PER_POD:
                        memo.clear()
                    value = memo[key] = compute(pod)
                    append(value)
        return out

    def last_ingest(self, pod: PodKey) -> float | None:
        """When the pod's data last arrived (None when it has none)."""
        with self._lock:
            entry = self._pods.get(pod)
            return entry.last_ingest if entry else None

    def drop(self, pod: PodKey) -> None:
        """Forget a pod (deleted, or no longer a target)."""
        with self._lock:
            if self._pods.pop(pod, None) is not None:
                self._changes += 1

    def expire(self) -> list[PodKey]:
        """Drop pods whose newest data is older than ``expire_after``; returns them."""
        horizon = self._clock() - self.expire_after
        with self._lock:
            gone = [k for k, e in self._pods.items() if e.last_ingest < horizon]
            for k in gone:
                del self._pods[k]
            if gone:
                self._changes += 1
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
                nbytes += 300 + 40 * len(entry.windows)
                for (_, label_set), w in entry.windows.items():
                    series += 1
                    samples += w.size
                    nbytes += w.nbytes() + 56 + 100 * len(label_set)
            return StoreStats(len(self._pods), series, samples, nbytes)
