"""ByteBoundedLRU: a cache whose entries' estimated sizes stay within a byte budget.

Every cache keyed by what a client sends (a ``metricLabelSelector``, a label selector, a
path) needs a bound in bytes, not in entries: 1,000 entries of one pod each and 1,000 of a
thousand pods each differ by a thousandfold. The least recently used entries go first.
`cachetools.LRUCache` keeps the order and the sizes; this adds a lock (the app's threads and
the event loop share the caches) and takes each entry's size from the caller, who knows what
the value holds. Sizes are estimates and should err high (`estimate_text`, `POINTER_BYTES`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ENTRY_OVERHEAD_BYTES = 256
"""What one entry costs beyond its key and value: the dict slot, the tuple, the LRU links."""
POINTER_BYTES = 8
"""One reference in a list or tuple."""


def estimate_text(*texts: str | bytes | None) -> int:
    """Bytes of some strings as CPython holds them (UCS-4 at worst, plus the object header)."""
    return sum(64 + 4 * len(t) for t in texts if t is not None)


class ByteBoundedLRU(Generic[K, V]):
    """``key -> value`` with the sum of the entries' estimated bytes at most `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: LRUCache[K, tuple[int, V]] = LRUCache(
            maxsize=max_bytes, getsizeof=lambda entry: entry[0]
        )
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep `value`; `size` is the entry's estimated bytes, key and value.

        An entry larger than the whole budget is not kept.
        """
        total = size + ENTRY_OVERHEAD_BYTES
        if total > self.max_bytes:
            return
        with self._lock:
            self._entries[key] = (total, value)

    def pop(self, key: K) -> None:
        """Forget one entry (one that no longer holds frees its room at once)."""
        with self._lock:
            self._entries.pop(key, None)

    def get_or_compute(self, key: K, compute: Callable[[], V], size: Callable[[V], int]) -> V:
        """The kept value, else `compute()` kept at `size(value)` bytes."""
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value, size(value))
        return value

    @property
    def bytes(self) -> int:
        """The estimated bytes held now (at most `max_bytes`)."""
        with self._lock:
            return int(self._entries.currsize)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
