"""One copy of each equal value the records of a watch keep.

150,000 pods name a few dozen namespaces, a few thousand nodes, a few hundred label sets and
request shapes; parsed from JSON each pod would hold its own copy of every one of them.
`SharedValues` hands back the copy it already has, so a record costs what is particular to
its object (its name, its creation time), not what it has in common with its neighbours.
Values must be immutable (strings, frozen dataclasses, tuples of them); label sets are
handed out read-only. The table is cleared when it passes `limit` entries (a cluster whose
label values are unique per pod must not grow it without end): values handed out before
stay valid, they are just no longer shared with new ones.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType
from typing import TypeVar

H = TypeVar("H", bound=Hashable)
V = TypeVar("V")
EMPTY: Mapping[str, str] = MappingProxyType({})
"""The one empty label set or node selector."""


class SharedValues:
    """A table of values already seen; not thread-safe (one per watch thread)."""

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._values: dict[object, object] = {}
        self._labels: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}

    def text(self, value: str) -> str:
        """The interpreter's one copy of ``value``."""
        return sys.intern(value)

    def value(self, value: H) -> H:
        """The first equal value seen (``value`` itself when it is new)."""
        found = self._values.get(value)
        if found is None:
            if len(self._values) >= self._limit:
                self._values.clear()
            self._values[value] = value
            return value
        return found  # type: ignore[return-value]  # equal and hashed alike: the same type

    def memo(self, key: Hashable, compute: Callable[[], V]) -> V:
        """What ``compute`` gave for an equal ``key`` before (it is called for a new key).

        For a value worth sharing that is costly to compute from raw input (a pod's requests
        parsed from its containers' quantities): equal input, one computation.
        """
        slot = ("memo", key)
        found = self._values.get(slot)
        if found is None:
            found = compute()
            if len(self._values) >= self._limit:
                self._values.clear()
            self._values[slot] = found
        return found  # type: ignore[return-value]  # stored under this key by this method

    def labels(self, labels: Mapping[str, object] | None) -> Mapping[str, str]:
        """A read-only label set (or node selector) equal to ``labels``, shared."""
        if not labels:
            return EMPTY
        key = tuple(sorted((sys.intern(str(k)), sys.intern(str(v))) for k, v in labels.items()))
        found = self._labels.get(key)
        if found is None:
            if len(self._labels) >= self._limit:
                self._labels.clear()
            found = MappingProxyType(dict(key))
            self._labels[key] = found
        return found

    def __len__(self) -> int:
        return len(self._values) + len(self._labels)
