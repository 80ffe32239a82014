"""What every `Collective` shares: gradient buckets and the protocol's small collectives.

`all_reduce_ints` and `broadcast_bytes` are written once over two numpy-level primitives.

Trainer side only (imports numpy); the agent process never imports this module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from agent.trainer.frameworks.base import ReduceOp

T = TypeVar("T")


def buckets(
    items: Iterable[T], key: Callable[[T], str], nbytes: Callable[[T], int], limit: int
) -> list[list[T]]:
    """Groups `items` by `key` (a dtype), in order, into buckets of at most `limit` bytes.

    An item larger than the limit gets a bucket of its own.
    """
    chains: dict[str, list[list[T]]] = {}
    sizes: dict[int, int] = {}
    for item in items:
        chain = chains.setdefault(key(item), [[]])
        size = nbytes(item)
        bucket = chain[-1]
        if bucket and sizes[id(bucket)] + size > limit:
            bucket = []
            chain.append(bucket)
        bucket.append(item)
        sizes[id(bucket)] = sizes.get(id(bucket), 0) + size
    return [b for chain in chains.values() for b in chain if b]


class ArrayCollective(ABC):
    """`all_reduce_ints` and `broadcast_bytes` over two numpy-in, numpy-out primitives.

    Each framework implements the primitives with its own tensors.
    """

    @abstractmethod
    def _all_reduce(self, values: npt.NDArray[np.int64], op: ReduceOp) -> npt.NDArray[np.int64]:
        """Element-wise reduction of an int64 vector over every rank."""

    @abstractmethod
    def _broadcast(self, array: npt.NDArray[Any], src: int) -> npt.NDArray[Any]:
        """Rank `src`'s array (same shape and dtype on every rank) on every rank.

        On rank `src` the array may be read-only (it is only read there); on the others it is
        a writable buffer the result may be received into.
        """

    def all_reduce_ints(self, values: Sequence[int], op: ReduceOp) -> list[int]:
        """See `Collective.all_reduce_ints`."""
        reduced = self._all_reduce(np.asarray(list(values), dtype=np.int64), op)
        return [int(v) for v in np.asarray(reduced).reshape(-1)]

    def broadcast_bytes(self, blob: bytes, src: int) -> bytes:
        """See `Collective.broadcast_bytes`: the size first, then the bytes.

        The sender's bytes go out as they are (no copy: a state of hundreds of MB is copied
        into fresh pages at every copy) and come back to it unchanged; the others receive into
        one buffer of their own.
        """
        size = int(self._broadcast(np.asarray([len(blob)], dtype=np.int64), src).reshape(-1)[0])
        if blob:  # the sender
            self._broadcast(np.frombuffer(blob, dtype=np.uint8), src)
            return blob
        if size == 0:
            return b""
        return np.asarray(self._broadcast(np.empty(size, dtype=np.uint8), src)).tobytes()
