"""The per-job history: measured throughput by size and placement, rescale pauses, progress.

It is what the scaling fit rests on, so it must outlive an adapter restart and be the same
for every adapter replica: a :class:`HistoryStore` keeps it somewhere shared (a ConfigMap,
:mod:`metrics_adapter.sizing.history_configmap`; memory for tests and simulators) and every replica
decides from the stored copy, never from what only it has scraped.

A throughput is kept per **placement**: (workers, nodes they spanned). On 4-GPU nodes two
workers on one node and two on two nodes are different jobs to the network (bert: 20.5 and
9.1 samples/s); kept as one "size 2" they made the class's small sizes noise. A record of
``nodes`` 0 is one whose placement is not known (a history written before placements were
kept, or a caller that cannot tell).

Values are exponentially weighted means (``alpha`` for the newest observation) with their
spread (the weighted mean of each observation's relative distance from the mean): two
measurements within their spread are not told apart. Memory is bounded: at most
``max_jobs`` jobs (least recently updated dropped first) and ``max_sizes`` records per job
(least recently updated dropped first).

The stored form (:meth:`SizeHistory.to_json`) is version 2: a record's key is ``"n@k"`` (n
workers on k nodes; ``"n"`` when k is not known). Version 1 (keys ``"n"``, no spread, no
progress) is still read, its records as of unknown placement.
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


Placed = tuple[int, int]
"""(workers, nodes they spanned); nodes 0: not known."""


@dataclass(frozen=True, slots=True)
class SizeRecord:
    """The job's throughput at one placement."""

    samples_per_second: float
    observations: int
    updated: float
    """When it was last observed (seconds, the caller's clock)."""
    spread: float = 0.0
    """Weighted mean of the observations' relative distance from the mean (0: one so far)."""


@dataclass(slots=True)
class JobHistory:
    """One job's records."""

    sizes: dict[Placed, SizeRecord] = field(default_factory=dict)
    """By (workers, nodes spanned)."""
    pause_s: float = 0.0
    """Mean training pause at a rescale, seconds (0: none measured)."""
    pauses: int = 0
    updated: float = 0.0
    first_size: int = 0
    """The size of its first measurement: the size it was created with (0: none yet)."""
    rescaled: list[float] = field(default_factory=list)
    """When its recent rescales were seen (the newest ``MAX_RESCALES_KEPT``)."""
    progress: float | None = None
    """The share of its planned samples trained, as its agents last said (None: not said)."""
    planned: float = 0.0
    """Its planned samples, estimated from throughput over the rate of progress (0: not
    known)."""


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

    def records(self, job: str, job_class: str | None = None) -> dict[Placed, SizeRecord]:
        """(workers, nodes) -> record for ``job`` (empty when never measured).

        With ``job_class`` (a :func:`class_key`), the class's records fill the placements the
        job has not measured itself.
        """
        h = self.jobs.get(job)
        own = dict(h.sizes) if h else {}
        c = self.jobs.get(job_class) if job_class is not None else None
        return own if c is None else {**c.sizes, **own}

    def placed(self, job: str, job_class: str | None = None) -> dict[Placed, float]:
        """(workers, nodes) -> samples per second (see :meth:`records`)."""
        return {k: r.samples_per_second for k, r in self.records(job, job_class).items()}

    def observed(self, job: str, job_class: str | None = None) -> dict[int, float]:
        """Size -> samples per second, whatever the placement (empty when never measured).

        Per size, the record of the fewest nodes spanned (one of unknown placement last);
        :meth:`placed` tells placements apart.
        """
        out: dict[int, tuple[int, float]] = {}
        for (n, k), r in self.records(job, job_class).items():
            rank = k if k > 0 else 1 << 30
            if n not in out or rank < out[n][0]:
                out[n] = (rank, r.samples_per_second)
        return {n: x for n, (_, x) in sorted(out.items())}

    def spread(self, job: str, job_class: str | None = None) -> float:
        """The relative spread of the job's measurements: the mean over its repeated ones."""
        spreads = [r.spread for r in self.records(job, job_class).values() if r.observations > 1]
        return sum(spreads) / len(spreads) if spreads else 0.0

    def progress(self, job: str) -> tuple[float | None, float]:
        """The job's last progress (share of its planned samples) and its planned samples."""
        h = self.jobs.get(job)
        return (h.progress, h.planned) if h else (None, 0.0)

    def pause(self, job: str, job_class: str | None = None) -> float:
        """The job's mean rescale pause in seconds (its class's until its own; 0: none)."""
        h = self.jobs.get(job)
        if h is not None and h.pauses:
            return h.pause_s
        c = self.jobs.get(job_class) if job_class is not None else None
        return c.pause_s if c is not None else 0.0

    def observe(
        self, job: str, size: int, samples_per_second: float, now: float, nodes: int = 0
    ) -> None:
        """Fold one throughput measurement at ``size`` workers on ``nodes`` nodes into the mean.

        ``nodes`` 0: the placement is not known.
        """
        if size < 1 or not (math.isfinite(samples_per_second) and samples_per_second > 0):
            return
        h = self._job(job, now)
        if not h.first_size:
            h.first_size = size
        key = (size, max(0, nodes))
        old = h.sizes.get(key)
        if old is None:
            h.sizes[key] = SizeRecord(samples_per_second, 1, now)
            if len(h.sizes) > self.max_sizes:
                del h.sizes[min(h.sizes, key=lambda k: (h.sizes[k].updated, k))]
        else:
            before = old.samples_per_second
            mean = before + self.alpha * (samples_per_second - before)
            distance = abs(samples_per_second - before) / before
            spread = old.spread + self.alpha * (distance - old.spread)
            if old.observations == 1:
                spread = distance
            h.sizes[key] = SizeRecord(mean, old.observations + 1, now, spread)

    def observe_progress(
        self, job: str, progress: float, now: float, planned: float | None = None
    ) -> None:
        """The job's share of its planned samples trained, and its planned samples.

        The planned samples only when measured, as a weighted mean: they do not change,
        estimates do.
        """
        if not (math.isfinite(progress) and 0.0 <= progress <= 1.0):
            return
        h = self._job(job, now)
        h.progress = progress
        if planned is not None and math.isfinite(planned) and planned > 0:
            h.planned = (
                planned if h.planned <= 0 else h.planned + self.alpha * (planned - h.planned)
            )

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
                "sizes": {_record_key(p): _record_value(r) for p, r in sorted(h.sizes.items())},
                "pause": [round(h.pause_s, 6), h.pauses],
                "updated": round(h.updated, 3),
            }
            if h.first_size:
                doc[key]["first"] = h.first_size
            if h.rescaled:
                doc[key]["rescaled"] = [round(t, 3) for t in h.rescaled]
            if h.progress is not None:
                doc[key]["progress"] = [round(h.progress, 6), round(h.planned, 3)]
        return json.dumps({"version": VERSION, "jobs": doc}, separators=(",", ":"), sort_keys=True)

    def load_json(self, text: str) -> None:
        """Replace the content with a stored ``to_json`` text.

        Raises:
            HistoryError: the text is not a history this version understands.
        """
        try:
            doc = json.loads(text)
            version = doc.get("version")
            if version not in READABLE_VERSIONS:
                raise HistoryError(f"unknown history version {version!r}")
            jobs = {}
            for key, entry in doc["jobs"].items():
                sizes = {
                    _parse_key(k, version): SizeRecord(
                        float(v[0]), int(v[1]), float(v[2]), float(v[3]) if len(v) > 3 else 0.0
                    )
                    for k, v in entry["sizes"].items()
                }
                pause, pauses = entry["pause"]
                progress, planned = entry.get("progress", (None, 0.0))
                jobs[str(key)] = JobHistory(
                    sizes,
                    float(pause),
                    int(pauses),
                    float(entry["updated"]),
                    int(entry.get("first", 0)),
                    [float(t) for t in entry.get("rescaled", [])][-MAX_RESCALES_KEPT:],
                    None if progress is None else float(progress),
                    float(planned),
                )
        except HistoryError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            raise HistoryError(f"unreadable sizing history: {e!r}") from e
        self.jobs = jobs


VERSION = 2
"""The stored form written: records by (workers, nodes), their spread, progress."""
READABLE_VERSIONS = (1, 2)


def _record_key(placed: Placed) -> str:
    n, k = placed
    return f"{n}@{k}" if k > 0 else str(n)


def _record_value(r: SizeRecord) -> list[float | int]:
    out: list[float | int] = [round(r.samples_per_second, 6), r.observations, round(r.updated, 3)]
    if r.spread > 0:
        out.append(round(r.spread, 6))
    return out


def _parse_key(text: str, version: int) -> Placed:
    """``"n@k"`` (version 2) or ``"n"`` (a placement not known; all of version 1)."""
    n, at, k = text.partition("@")
    if at and version < 2:
        raise ValueError(f"record key {text!r} in a version {version} history")
    placed = (int(n), int(k) if at else 0)
    if placed[0] < 1 or placed[1] < 0:
        raise ValueError(f"record key {text!r}: workers >= 1 and nodes >= 0")
    return placed


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
