"""Paddle's tensor operations for the timed gradient all-reduce.

The bucketing and timing are `agent.trainer.frameworks.gradients` (what ``comm_seconds``
measures is said there). Use `DataParallel.no_sync()` around backward, or no `DataParallel` at
all, so that the gradients are all-reduced only here.

This module imports Paddle; the agent process never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import paddle
import paddle.distributed as dist

from agent.trainer.frameworks.gradients import DEFAULT_BUCKET_BYTES, BucketedGradientAllReduce

__all__ = ["DEFAULT_BUCKET_BYTES", "GradientAllReduce", "broadcast_parameters"]


class GradientAllReduce(BucketedGradientAllReduce):
    """`BucketedGradientAllReduce` over Paddle tensors and `paddle.distributed`."""

    @staticmethod
    def _trainable(parameter: Any) -> bool:
        return not parameter.stop_gradient

    @staticmethod
    def _device_synchronizer(parameters: list[Any]) -> Callable[[], None]:
        device = str(paddle.device.get_device())
        if device.startswith(("gpu", "xpu")):
            return lambda: paddle.device.synchronize()
        return lambda: None

    @staticmethod
    def _nbytes(tensor: Any) -> int:
        return int(tensor.size) * int(tensor.element_size())

    @staticmethod
    def _flatten(bucket: list[Any]) -> Any:
        return paddle.concat([g.reshape([-1]) for g in bucket])

    def _all_reduce(self, flat: Any) -> None:
        dist.all_reduce(flat, group=self._group, sync_op=True)

    @staticmethod
    def _scatter_average(flat: Any, world_size: int, bucket: list[Any]) -> None:
        parts = paddle.split(flat / world_size, [int(g.size) for g in bucket])
        for g, part in zip(bucket, parts, strict=True):
            paddle.assign(part.reshape(g.shape), output=g)


def broadcast_parameters(parameters: Iterable[Any], src: int = 0, group: Any = None) -> None:
    """Copies rank `src`'s parameters to every rank, so all ranks start identical."""
    for p in parameters:
        dist.broadcast(p, src=src, group=group)
