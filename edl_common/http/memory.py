"""The memory a server may use: the container's limit, and whether one more client still fits.

Why: unauthenticated floods took the adapter past its container's limit (issue 37: 1,500
half-open ClientHellos, 242 -> 619 MB; 600 slow request bodies, 158 -> 586 MB; the chart's
limit is 512 MiB), and a pod over its limit is OOM-killed, front proxy and all. Admission
(:mod:`edl_common.http.admission`) asks :meth:`MemoryBudget.fits` before it takes on memory
for a client that has not proved who it is (a new connection, a request body of a connection
without a verified client certificate) and refuses, or closes an idle stranger, while the
process is near its high-water mark.

The budget is the container's memory limit (cgroup v2 ``memory.max``, else v1
``memory.limit_in_bytes``) unless a setting gives one. What counts is the process's resident
memory, read at most every :data:`SAMPLE_S` (``/proc/self/statm``), plus what admission took
on since: connections charge an estimate when they open and give it back when they close, so
a burst between two readings is counted and a connection closed for a newcomer makes room at
once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SAMPLE_S = 0.25
"""Seconds between readings of the process's resident memory."""
RECLAIM_S = 5.0
"""Seconds between two calls of the reclaim hook (when admission finds no room)."""
ADMIT_RATIO = 0.7
"""Of the budget, what admission fills: the rest is for connections already admitted to
grow (a handshake's state, pipelined requests, answers) and for the front proxy."""
SWAP_RATIO = 0.75
"""Past the high water and up to this share, a newcomer may still take a stranger's place
(a swap); beyond it, none comes in. Swapping connections at full speed fragments the heap
(1,500 half-open handshakes re-opened as they were closed: resident memory 12 % of the budget
above the high water within a minute), so the swapping stops short of the limit."""
_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def container_memory_limit(
    root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")
) -> int | None:
    """The memory limit of this process's cgroup (the tightest on its path), or None.

    cgroup v2: ``memory.max`` of the process's group and its ancestors; cgroup v1 (and the
    v1 ``memory`` hierarchy of a hybrid mount): ``memory/<group>/memory.limit_in_bytes``.
    Inside a container the group is usually ``/`` (a cgroup namespace).
    """
    v2, v1 = _groups(membership)
    found: list[int] = []
    if v2 is not None:
        found += _read_up(root, v2, "memory.max")
    if not found and v1 is not None:
        found += _read_up(root / "memory", v1, "memory.limit_in_bytes")
    limits = [n for n in found if 0 < n < _UNLIMITED]
    return min(limits) if limits else None


def _groups(membership: Path) -> tuple[str | None, str | None]:
    """The process's v2 group and its v1 ``memory`` group, from /proc/self/cgroup."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return "/", "/"
    v2 = v1 = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def _read_up(base: Path, group: str, name: str) -> list[int]:
    """``name`` in ``base/group`` and each ancestor up to ``base`` (what exists and is a number)."""
    values = []
    current = Path(group.strip() or "/")
    for _ in range(64):  # the depth of a cgroup path, bounded
        path = base / str(current).lstrip("/") / name
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        if text.isdigit():
            values.append(int(text))
        if current == current.parent:
            break
        current = current.parent
    return values


def process_rss() -> int:
    """This process's resident memory in bytes (0 where /proc is not there)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


class MemoryBudget:
    """Whether a client's memory still fits under the high-water mark of ``limit`` bytes.

    Args:
        limit: the bytes the process may use (the container's limit, or a setting).
        admit_ratio: the high-water mark, as a share of ``limit``.
        rss: reads the process's resident memory (bytes).
        reclaim: gives freed memory back to the OS (the adapter: glibc's ``malloc_trim``),
            called when there is no room, at most every :data:`RECLAIM_S`.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        limit: int,
        admit_ratio: float = ADMIT_RATIO,
        rss: Callable[[], int] = process_rss,
        reclaim: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.high_water = int(limit * admit_ratio)
        self.swap_line = max(self.high_water, int(limit * SWAP_RATIO))
        self._rss = rss
        self._reclaim = reclaim
        self._clock = clock
        self._sampled_at = -SAMPLE_S
        self._reclaimed_at = -RECLAIM_S
        self._rest = 0
        """Resident memory not charged to connections, at the last reading."""

    def fits(self, charged: int, cost: int) -> bool:
        """Whether ``cost`` more bytes fit, while connections hold ``charged`` bytes."""
        now = self._clock()
        if now - self._sampled_at >= SAMPLE_S:
            self._sample(now, charged)
        if self._rest + charged + cost <= self.high_water:
            return True
        if self._reclaim is None or now - self._reclaimed_at < RECLAIM_S:
            return False
        self._reclaimed_at = now
        try:
            self._reclaim()
        except Exception:  # the hook is best effort; admission goes on without it
            log.exception("giving freed memory back failed")
        self._sample(now, charged)
        return self._rest + charged + cost <= self.high_water

    def swappable(self, charged: int) -> bool:
        """Whether a newcomer may take the place of a connection holding as much.

        Against the reading :meth:`fits` last took.
        """
        return self._rest + charged <= self.swap_line

    def _sample(self, now: float, charged: int) -> None:
        self._sampled_at = now
        self._rest = self._rss() - charged
