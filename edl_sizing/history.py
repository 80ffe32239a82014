"""The per-job, per-size history: measured throughput at each world size, and rescale pauses.

It is what the scaling fit rests on, so it must outlive an adapter restart and be the same
for every adapter replica: a :class:`HistoryStore` keeps it somewhere shared (a ConfigMap,
:mod:`metrics_adapter.sizing.history_configmap`; memory for tests and simulators) and every replica
decides from the stored copy, never from what only it has scraped.

Values are exponentially weighted means (``alpha`` for the newest observation); memory is
bounded: at most ``max_jobs`` jobs (least recently updated dropped first) and
``max_sizes`` sizes per job (least recently updated dropped first).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol


class HistoryError(ValueError):
    """A stored history could not be read."""


@dataclass(frozen=True, slots=True)
class SizeRecord:
    """The job's throughput at one size."""

    samples_per_second: float
    observations: int
    updated: float
    """When it was last observed (seconds, the caller's clock)."""


@dataclass(slots=True)
class JobHistory:
    """One job's records."""

    sizes: dict[int, SizeRecord] = field(default_factory=dict)
    pause_s: float = 0.0
    """Mean training pause at a rescale, seconds (0: none measured)."""
    pauses: int = 0
    updated: float = 0.0
    first_size: int = 0
    """The size of its first measurement: the size it was created with (0: none yet)."""
    rescaled: list[float] = field(default_factory=list)
    """When its recent rescales were seen (the newest ``MAX_RESCALES_KEPT``)."""


MAX_RESCALES_KEPT = 32


CLASS_PREFIX = "class:"


def class_key(namespace: str, job_class: str) -> str:
    """The history key of a job class (``edl.paddlepaddle.org/class``) in a namespace."""
    return f"{CLASS_PREFIX}{namespace}/{job_class}"


class SizeHistory:
    """The history of every job and job class (not thread-safe: a store serialises access).

    A job of a class is recorded twice: under its own key and under its class's
    (:func:`class_key`), so a new job of the class starts from what its class measured.
    """

    def __init__(
        self,
        jobs: dict[str, JobHistory] | None = None,
        *,
        alpha: float = 0.3,
        max_jobs: int = 512,
        max_sizes: int = 64,
    ) -> None:
        self.jobs: dict[str, JobHistory] = dict(jobs or {})
        self.alpha = alpha
        self.max_jobs = max_jobs
        self.max_sizes = max_sizes

    def observed(self, job: str, job_class: str | None = None) -> dict[int, float]:
        """Size -> samples per second for ``job`` (empty when never measured).

        With ``job_class`` (a :func:`class_key`), the class's sizes fill those the job has
        not measured itself.
        """
        h = self.jobs.get(job)
        own = {n: r.samples_per_second for n, r in h.sizes.items()} if h else {}
        c = self.jobs.get(job_class) if job_class is not None else None
        if c is None:
            return own
        return {**{n: r.samples_per_second for n, r in c.sizes.items()}, **own}

    def pause(self, job: str, job_class: str | None = None) -> float:
        """The job's mean rescale pause in seconds (its class's until its own; 0: none)."""
        h = self.jobs.get(job)
        if h is not None and h.pauses:
            return h.pause_s
        c = self.jobs.get(job_class) if job_class is not None else None
        return c.pause_s if c is not None else 0.0

    def observe(self, job: str, size: int, samples_per_second: float, now: float) -> None:
        """Fold one throughput measurement at ``size`` workers into the mean."""
        if size < 1 or not (math.isfinite(samples_per_second) and samples_per_second > 0):
            return
        h = self._job(job, now)
        if not h.first_size:
            h.first_size = size
        old = h.sizes.get(size)
        if old is None:
            h.sizes[size] = SizeRecord(samples_per_second, 1, now)
            if len(h.sizes) > self.max_sizes:
                del h.sizes[min(h.sizes, key=lambda n: (h.sizes[n].updated, n))]
        else:
            mean = old.samples_per_second + self.alpha * (
                samples_per_second - old.samples_per_second
            )
            h.sizes[size] = SizeRecord(mean, old.observations + 1, now)

    def observe_pause(self, job: str, pause_s: float, now: float, rescales: int = 1) -> None:
        """Fold a measured rescale pause (seconds) into the mean; ``rescales`` happened."""
        if not (math.isfinite(pause_s) and pause_s >= 0):
            return
        h = self._job(job, now)
        h.pause_s = pause_s if not h.pauses else h.pause_s + self.alpha * (pause_s - h.pause_s)
        h.pauses += 1
        h.rescaled.extend([now] * max(0, min(rescales, MAX_RESCALES_KEPT)))
        del h.rescaled[:-MAX_RESCALES_KEPT]

    def first_size(self, job: str) -> int:
        """The size of the job's first measurement (0: never measured)."""
        h = self.jobs.get(job)
        return h.first_size if h else 0

    def rescales_since(self, job: str, since: float) -> int:
        """Rescales of the job seen after ``since``."""
        h = self.jobs.get(job)
        return sum(1 for t in h.rescaled if t > since) if h else 0

    def forget_older_than(self, horizon: float) -> int:
        """Drop jobs not updated since ``horizon``; returns how many."""
        old = [k for k, h in self.jobs.items() if h.updated < horizon]
        for k in old:
            del self.jobs[k]
        return len(old)

    def _job(self, job: str, now: float) -> JobHistory:
        h = self.jobs.get(job)
        if h is None:
            if len(self.jobs) >= self.max_jobs:
                del self.jobs[min(self.jobs, key=lambda k: (self.jobs[k].updated, k))]
            h = self.jobs[job] = JobHistory()
        h.updated = max(h.updated, now)
        return h

    def copy(self) -> SizeHistory:
        """An independent copy."""
        jobs = {
            k: replace(h, sizes=dict(h.sizes), rescaled=list(h.rescaled))
            for k, h in self.jobs.items()
        }
        return SizeHistory(jobs, alpha=self.alpha, max_jobs=self.max_jobs, max_sizes=self.max_sizes)

    def to_json(self) -> str:
        """Compact JSON, keys sorted (the same history always gives the same text)."""
        doc: dict[str, Any] = {}
        for key, h in sorted(self.jobs.items()):
            doc[key] = {
                "sizes": {
                    str(n): [round(r.samples_per_second, 6), r.observations, round(r.updated, 3)]
                    for n, r in sorted(h.sizes.items())
                },
                "pause": [round(h.pause_s, 6), h.pauses],
                "updated": round(h.updated, 3),
            }
            if h.first_size:
                doc[key]["first"] = h.first_size
            if h.rescaled:
                doc[key]["rescaled"] = [round(t, 3) for t in h.rescaled]
        return json.dumps({"version": 1, "jobs": doc}, separators=(",", ":"), sort_keys=True)

    def load_json(self, text: str) -> None:
        """Replace the content with a stored ``to_json`` text.

        Raises:
            HistoryError: the text is not a history this version understands.
        """
        try:
            doc = json.loads(text)
            if doc.get("version") != 1:
                raise HistoryError(f"unknown history version {doc.get('version')!r}")
            jobs = {}
            for key, entry in doc["jobs"].items():
                sizes = {
                    int(n): SizeRecord(float(v[0]), int(v[1]), float(v[2]))
                    for n, v in entry["sizes"].items()
                }
                pause, pauses = entry["pause"]
                jobs[str(key)] = JobHistory(
                    sizes,
                    float(pause),
                    int(pauses),
                    float(entry["updated"]),
                    int(entry.get("first", 0)),
                    [float(t) for t in entry.get("rescaled", [])][-MAX_RESCALES_KEPT:],
                )
        except HistoryError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            raise HistoryError(f"unreadable sizing history: {e!r}") from e
        self.jobs = jobs


class HistoryStore(Protocol):
    """Where the history is kept, shared by every adapter replica."""

    def load(self) -> SizeHistory:
        """The stored history (a private copy)."""
        ...

    def update(self, change: Callable[[SizeHistory], bool]) -> SizeHistory:
        """Apply ``change`` to the stored history, retrying on concurrent writes.

        ``change`` returns whether it changed anything; the result is the history as stored
        afterwards.
        """
        ...


class MemoryHistoryStore:
    """A history in this process (tests, simulators, a single local adapter)."""

    def __init__(self, history: SizeHistory | None = None) -> None:
        self._history = history or SizeHistory()
        self._lock = threading.Lock()

    def load(self) -> SizeHistory:
        """A copy of the history."""
        with self._lock:
            return self._history.copy()

    def update(self, change: Callable[[SizeHistory], bool]) -> SizeHistory:
        """Apply ``change`` in place."""
        with self._lock:
            change(self._history)
            return self._history.copy()
