"""ByteBoundedLRU: a cache whose entries' estimated sizes stay within a byte budget.

Every cache keyed by what a client sends (a ``metricLabelSelector``, a label selector, a
path) needs a bound in bytes, not in entries: 1,000 entries of one pod each and 1,000 of a
thousand pods each differ by a thousandfold. The least recently used entries go first.
`cachetools.LRUCache` keeps the order and the sizes; this adds a lock (the app's threads and
the event loop share the caches) and takes each entry's size from the caller, who knows what
the value holds. Sizes are estimates and should err high (`estimate_text`, `POINTER_BYTES`,
`estimate_nested`).

With a `clock`, entries also expire (`put(..., expires_at=...)`, cachetools' `TLRUCache`): the
TokenReview and SubjectAccessReview caches, whose keys hold what a client sends (a path of up
to 16 KiB), are bounded in bytes and in time.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import Cache, LRUCache, TLRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ENTRY_OVERHEAD_BYTES = 256
"""What one entry costs beyond its key and value: the dict slot, the tuple, the LRU links."""
POINTER_BYTES = 8
"""One reference in a list or tuple."""
TIMED_ENTRY_OVERHEAD_BYTES = 256
"""What an expiring entry costs beyond `ENTRY_OVERHEAD_BYTES`: its heap item and order slot."""


def estimate_text(*texts: str | bytes | None) -> int:
    """Bytes of some strings as CPython holds them (UCS-4 at worst, plus the object header)."""
    return sum(64 + 4 * len(t) for t in texts if t is not None)


def estimate_nested(obj: object) -> int:
    """Bytes of a key or value built of tuples, lists, strings and scalars (erring high).

    Anything else counts as 256 bytes: callers pass only what they built themselves.
    """
    if isinstance(obj, str | bytes):
        return estimate_text(obj)
    if isinstance(obj, tuple | list):
        return 64 + POINTER_BYTES * len(obj) + sum(estimate_nested(o) for o in obj)
    if obj is None or isinstance(obj, bool | int | float):
        return 32
    return 256


class ByteBoundedLRU(Generic[K, V]):
    """``key -> value`` with the sum of the entries' estimated bytes at most `max_bytes`.

    With a `clock`, an entry put with `expires_at` is gone from that time on (`get` misses,
    `expire()` and every `put` drop it).
    """

    def __init__(self, max_bytes: int, clock: Callable[[], float] | None = None) -> None:
        self.max_bytes = max_bytes
        self._timed = clock is not None
        self._entries: Cache[K, tuple[int, V, float]]
        if clock is None:
            self._entries = LRUCache(maxsize=max_bytes, getsizeof=_entry_size)
        else:
            self._entries = TLRUCache(
                maxsize=max_bytes, ttu=_entry_expiry, timer=clock, getsizeof=_entry_size
            )
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def put(self, key: K, value: V, size: int, expires_at: float = math.inf) -> None:
        """Keep `value`; `size` is the entry's estimated bytes, key and value.

        An entry larger than the whole budget is not kept. `expires_at` (the clock's time)
        needs a cache made with a clock; an entry already expired is not kept.
        """
        total = size + ENTRY_OVERHEAD_BYTES
        if self._timed:
            total += TIMED_ENTRY_OVERHEAD_BYTES
        elif expires_at != math.inf:
            raise ValueError("expires_at needs a ByteBoundedLRU made with a clock")
        if total > self.max_bytes:
            return
        with self._lock:
            self._entries[key] = (total, value, expires_at)

    def expire(self) -> None:
        """Drop every expired entry now (a cache without a clock has none)."""
        if isinstance(self._entries, TLRUCache):
            with self._lock:
                self._entries.expire()

    def keys(self) -> list[K]:
        """The keys held now (a copy; expired ones left out)."""
        with self._lock:
            return list(self._entries)

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


def _entry_size(entry: tuple[int, object, float]) -> int:
    return entry[0]


def _entry_expiry(_key: object, entry: tuple[int, object, float], _now: float) -> float:
    return entry[2]
