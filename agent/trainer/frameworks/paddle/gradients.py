"""Explicit, timed gradient all-reduce for Paddle data-parallel training.

Why not `paddle.DataParallel`'s own all-reduce: it fuses gradients into buckets and launches
the all-reduce from backward hooks, overlapped with the rest of backward, so no Python code can
see where communication starts or ends. Here the gradients are all-reduced after `backward()`
(use `DataParallel.no_sync()` around backward, or no `DataParallel` at all) in fused
per-dtype buckets, and each bucket's collective is timed between two sync points.

What `comm_seconds` measures, per bucket: from just before `all_reduce` is issued (after the
device has finished backward) until the all-reduce has completed on this rank (device
synchronised on GPU; gloo's CPU all-reduce returns when done). That includes the time this rank
waits for slower ranks to reach the collective, so a high comm ratio means "slow network" or
"stragglers", both reasons to think before scaling out. Packing gradients into the bucket and
unpacking the average back are memory copies and count as compute. `comm_bytes` counts the
payload this rank put into all-reduce (bucket elements x element size), not wire bytes (a ring
all-reduce moves about 2(n-1)/n times that).

This module imports Paddle; the agent process never imports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import paddle
import paddle.distributed as dist

from agent.recording import StepRecorder
from agent.trainer.frameworks.arrays import buckets

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
"""Same order as DataParallel's default fused buffer (25 MB)."""


def _device_synchronizer() -> Callable[[], None]:
    device = str(paddle.device.get_device())
    if device.startswith(("gpu", "xpu")):
        return lambda: paddle.device.synchronize()
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
        self._params = [p for p in parameters if not p.stop_gradient]
        self._recorder = recorder
        self._world_size = world_size
        self._group = group
        self._bucket_bytes = bucket_bytes
        self._sync = synchronize or _device_synchronizer()
        self._clock = clock

    def _buckets(self, grads: list[Any]) -> list[list[Any]]:
        return buckets(
            grads,
            key=lambda g: str(g.dtype),
            nbytes=lambda g: int(g.size) * int(g.element_size()),
            limit=self._bucket_bytes,
        )

    def __call__(self) -> float:
        """All-reduces and averages the gradients in place; returns the seconds spent in comm."""
        if self._world_size <= 1:
            return 0.0
        grads = [p.grad for p in self._params if p.grad is not None]
        spent = 0.0
        for bucket in self._buckets(grads):
            flat = paddle.concat([g.reshape([-1]) for g in bucket])
            nbytes = int(flat.size) * int(flat.element_size())
            self._sync()
            t0 = self._clock()
            dist.all_reduce(flat, group=self._group, sync_op=True)
            self._sync()
            seconds = self._clock() - t0
            self._recorder.record_comm(seconds, nbytes)
            spent += seconds
            flat = flat / self._world_size
            parts = paddle.split(flat, [int(g.size) for g in bucket])
            for g, part in zip(bucket, parts, strict=True):
                paddle.assign(part.reshape(g.shape), output=g)
        return spent


def broadcast_parameters(parameters: Iterable[Any], src: int = 0, group: Any = None) -> None:
    """Copies rank `src`'s parameters to every rank, so all ranks start identical."""
    for p in parameters:
        dist.broadcast(p, src=src, group=group)
