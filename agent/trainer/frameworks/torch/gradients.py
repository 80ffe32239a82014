"""Explicit, timed gradient all-reduce for PyTorch data-parallel training.

Why not `DistributedDataParallel`'s own all-reduce: DDP registers autograd hooks that launch an
asynchronous all-reduce per gradient bucket while backward is still computing the gradients of
earlier layers, and waits for them all at the end of backward. That overlap is the point of DDP
(on a large model it hides most of the communication), but it leaves no interval one could
call "communication time": the wall time of a bucket's all-reduce is mostly spent under
backward's compute. Here the gradients are all-reduced after `backward()` (use no DDP, or
backward inside `ddp.no_sync()`), in fused per-dtype buckets, each timed between two sync
points, so the comm/compute split the HPA metrics need is measured, at the cost of the overlap.

What `comm_seconds` measures, per bucket, is exactly what the Paddle module measures: from just
before `all_reduce` is issued (after `torch.cuda.synchronize()` on GPU, so backward's kernels are
not counted) until it has completed on this rank, including the time spent waiting for slower
ranks. `comm_bytes` is the payload (bucket elements x element size), not wire bytes.

This module imports torch; the agent process never imports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from agent.recording import StepRecorder
from agent.trainer.frameworks.arrays import buckets

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
"""DDP's default bucket cap (25 MiB)."""


def _device_synchronizer(params: list[Any]) -> Callable[[], None]:
    if any(p.is_cuda for p in params):
        return lambda: torch.cuda.synchronize()
    return lambda: None


class GradientAllReduce:
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
        self._params = [p for p in parameters if p.requires_grad]
        self._recorder = recorder
        self._world_size = world_size
        self._group = group
        self._bucket_bytes = bucket_bytes
        self._sync = synchronize or _device_synchronizer(self._params)
        self._clock = clock

    def _buckets(self, grads: list[Any]) -> list[list[Any]]:
        return buckets(
            grads,
            key=lambda g: str(g.dtype),
            nbytes=lambda g: g.numel() * g.element_size(),
            limit=self._bucket_bytes,
        )

    def __call__(self) -> float:
        """All-reduces and averages the gradients in place; returns the seconds spent in comm."""
        if self._world_size <= 1:
            return 0.0
        with torch.no_grad():
            return self._reduce([p.grad for p in self._params if p.grad is not None])

    def _reduce(self, grads: list[Any]) -> float:
        spent = 0.0
        for bucket in self._buckets(grads):
            flat = torch.cat([g.reshape(-1) for g in bucket])
            nbytes = flat.numel() * flat.element_size()
            self._sync()
            t0 = self._clock()
            dist.all_reduce(flat, group=self._group)
            self._sync()
            seconds = self._clock() - t0
            self._recorder.record_comm(seconds, nbytes)
            spent += seconds
            flat.div_(self._world_size)
            offset = 0
            for g in bucket:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        return spent


def broadcast_parameters(parameters: Iterable[Any], src: int = 0, group: Any = None) -> None:
    """Copies rank `src`'s parameters to every rank, so all ranks start identical."""
    with torch.no_grad():
        for p in parameters:
            dist.broadcast(p.data, src=src, group=group)
