"""The timed, bucketed gradient all-reduce, written once for every framework.

Why not the frameworks' own data-parallel wrappers: they launch the all-reduce from backward
hooks, overlapped with the rest of backward, so no Python code can see where communication
starts or ends. Here the gradients are all-reduced after `backward()` in fused per-dtype
buckets, and each bucket's collective is timed between two device sync points.

What `comm_seconds` measures, per bucket: from just before `all_reduce` is issued (after the
device has finished backward) until the all-reduce has completed on this rank (device
synchronised on GPU; gloo's CPU all-reduce returns when done). That includes the time this rank
waits for slower ranks to reach the collective, so a high comm ratio means "slow network" or
"stragglers", both reasons to think before scaling out. Packing gradients into the bucket and
unpacking the average back are memory copies and count as compute. `comm_bytes` counts the
payload this rank put into all-reduce (bucket elements x element size), not wire bytes (a ring
all-reduce moves about 2(n-1)/n times that).

Each framework's ``gradients`` module subclasses `BucketedGradientAllReduce` with its tensor
operations only. This module imports no framework.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from agent.trainer.frameworks.arrays import buckets
from agent.trainer.recording import StepRecorder

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
"""Same order as DataParallel's fused buffer and DDP's bucket cap (25 MiB)."""


class BucketedGradientAllReduce(ABC):
    """Averages the gradients of `parameters` across the world and records the communication.

    Call it once per step, after `loss.backward()` and before `optimizer.step()`. With a world
    of one rank it does nothing and records nothing.
    """

    def __init__(
        self,
        parameters: Iterable[Any],
        recorder: StepRecorder,
        world_size: int,
        group: Any = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        synchronize: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._params = [p for p in parameters if self._trainable(p)]
        self._recorder = recorder
        self._world_size = world_size
        self._group = group
        self._bucket_bytes = bucket_bytes
        self._sync = synchronize or self._device_synchronizer(self._params)
        self._clock = clock

    # -- what differs between frameworks -------------------------------------------------

    @staticmethod
    @abstractmethod
    def _trainable(parameter: Any) -> bool:
        """Whether the parameter takes gradients."""

    @staticmethod
    @abstractmethod
    def _device_synchronizer(parameters: list[Any]) -> Callable[[], None]:
        """A wait for the device's queued work (a no-op on CPU)."""

    @staticmethod
    @abstractmethod
    def _nbytes(tensor: Any) -> int:
        """The tensor's payload in bytes."""

    @staticmethod
    @abstractmethod
    def _flatten(bucket: list[Any]) -> Any:
        """One 1-D tensor of the bucket's gradients, in order."""

    @abstractmethod
    def _all_reduce(self, flat: Any) -> None:
        """Sums `flat` in place over the group (blocking)."""

    @staticmethod
    @abstractmethod
    def _scatter_average(flat: Any, world_size: int, bucket: list[Any]) -> None:
        """Writes `flat / world_size` back into the bucket's gradients, in place."""

    def _reduce_context(self) -> Any:
        """A context the reduction runs in (torch: ``no_grad``); none by default."""
        return None

    # -- written once ------------------------------------------------------------------

    def __call__(self) -> float:
        """All-reduces and averages the gradients in place; returns the seconds spent in comm."""
        if self._world_size <= 1:
            return 0.0
        context = self._reduce_context()
        if context is None:
            return self._reduce()
        with context:
            return self._reduce()

    def _buckets(self, grads: list[Any]) -> list[list[Any]]:
        return buckets(
            grads, key=lambda g: str(g.dtype), nbytes=self._nbytes, limit=self._bucket_bytes
        )

    def _reduce(self) -> float:
        grads = [p.grad for p in self._params if p.grad is not None]
        spent = 0.0
        for bucket in self._buckets(grads):
            flat = self._flatten(bucket)
            nbytes = self._nbytes(flat)
            self._sync()
            t0 = self._clock()
            self._all_reduce(flat)
            self._sync()
            seconds = self._clock() - t0
            self._recorder.record_comm(seconds, nbytes)
            spent += seconds
            self._scatter_average(flat, self._world_size, bucket)
        return spent
