"""What the trainer's checkpointing did, in a report file the agent exports as metrics.

The writer thread (and the restore path) count into `CheckpointStats`; after every event it
rewrites ``checkpoints-<incarnation>.json`` in ``EDL_METRICS_DIR`` atomically (events are
rare: one per checkpoint), beside the trainer's own report (`agent.trainer.reports`). The agent sums
the counters of every incarnation's file and exports the newest checkpoint's step and time
(`agent.collectors.checkpoints`), so a restarted trainer never makes a counter go back.
"""

from __future__ import annotations

import json
import os
import re
import threading
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

STATS_FORMAT = 1
CHECKPOINT_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
"""Upper bounds (seconds) of `edl_trainer_checkpoint_seconds`; `+Inf` is implied."""
_NAME = re.compile(r"^checkpoints-(\d+)\.json$")


@dataclass(frozen=True)
class CheckpointCounts:
    """One incarnation's checkpoint counters, as last written."""

    writes: int = 0
    """Checkpoints committed."""
    bytes: int = 0
    """Payload + manifest bytes written."""
    seconds_sum: float = 0.0
    """Sum of whole-checkpoint times (state copy to commit)."""
    bucket_counts: tuple[int, ...] = (0,) * (len(CHECKPOINT_BUCKETS) + 1)
    """Per-bucket (not cumulative) counts over `CHECKPOINT_BUCKETS` and `+Inf`."""
    stall_seconds: float = 0.0
    """Of which the training thread waited (the copy of the state to memory)."""
    failures: int = 0
    """Writes that failed (the store could not be written)."""
    invalid: int = 0
    """Checkpoints found unusable on restore (corrupt, partial), the previous one used."""
    last_step: int | None = None
    """Step of the newest checkpoint this trainer wrote or restored from."""
    last_unix: float | None = None
    """When that checkpoint was committed (Unix seconds)."""


def stats_path(metrics_dir: Path, incarnation: int) -> Path:
    """Where incarnation `incarnation` writes its checkpoint counters."""
    return metrics_dir / f"checkpoints-{incarnation:06d}.json"


class CheckpointStats:
    """Thread-safe counters of one trainer incarnation, persisted to `path` after each event."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._counts = CheckpointCounts()

    @property
    def counts(self) -> CheckpointCounts:
        """A copy of the counters now."""
        with self._lock:
            return self._counts

    def wrote(self, step: int, committed: float, nbytes: int, seconds: float, stall: float) -> None:
        """One checkpoint committed at `committed` (Unix), `seconds` after its copy started."""

        def add(c: CheckpointCounts) -> CheckpointCounts:
            buckets = list(c.bucket_counts)
            buckets[bisect_left(CHECKPOINT_BUCKETS, seconds)] += 1
            return replace(
                c,
                writes=c.writes + 1,
                bytes=c.bytes + nbytes,
                seconds_sum=c.seconds_sum + seconds,
                bucket_counts=tuple(buckets),
                stall_seconds=c.stall_seconds + stall,
                last_step=step,
                last_unix=committed,
            )

        self._update(add)

    def restored(self, step: int, committed: float) -> None:
        """The trainer continues from the checkpoint of `step` committed at `committed`."""
        self._update(lambda c: replace(c, last_step=step, last_unix=committed))

    def failed(self) -> None:
        """A write failed."""
        self._update(lambda c: replace(c, failures=c.failures + 1))

    def invalid(self) -> None:
        """A checkpoint was found unusable on restore."""
        self._update(lambda c: replace(c, invalid=c.invalid + 1))

    def _update(self, change: Callable[[CheckpointCounts], CheckpointCounts]) -> None:
        with self._lock:
            self._counts = change(self._counts)
            self._persist()

    def _persist(self) -> None:
        """Atomic rewrite (caller holds the lock); a failure only loses metrics, never training."""
        if self._path is None:
            return
        doc = {"format": STATS_FORMAT, "bounds": list(CHECKPOINT_BUCKETS), **asdict(self._counts)}
        tmp = self._path.with_name(f".{self._path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, self._path)
        except OSError:
            pass


def _parse(doc: Any) -> CheckpointCounts:
    if not isinstance(doc, dict) or doc.get("format") != STATS_FORMAT:
        raise ValueError(f"not a format-{STATS_FORMAT} checkpoint report")
    if tuple(float(b) for b in doc["bounds"]) != CHECKPOINT_BUCKETS:
        raise ValueError("other histogram bounds")
    counts = CheckpointCounts(
        writes=int(doc["writes"]),
        bytes=int(doc["bytes"]),
        seconds_sum=float(doc["seconds_sum"]),
        bucket_counts=tuple(int(n) for n in doc["bucket_counts"]),
        stall_seconds=float(doc["stall_seconds"]),
        failures=int(doc["failures"]),
        invalid=int(doc["invalid"]),
        last_step=None if doc["last_step"] is None else int(doc["last_step"]),
        last_unix=None if doc["last_unix"] is None else float(doc["last_unix"]),
    )
    if len(counts.bucket_counts) != len(CHECKPOINT_BUCKETS) + 1:
        raise ValueError("bucket counts do not match the bounds")
    return counts


def read_stats(metrics_dir: Path) -> tuple[list[CheckpointCounts], list[str]]:
    """Every incarnation's counters in `metrics_dir`, and one line per unreadable file."""
    found, errors = [], []
    for name in sorted(os.listdir(metrics_dir)):
        if not _NAME.match(name):
            continue
        try:
            found.append(_parse(json.loads((metrics_dir / name).read_text(encoding="utf-8"))))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError) as e:
            errors.append(f"{metrics_dir / name}: {e}")
    return found, errors
