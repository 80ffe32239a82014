"""PyTorch's tensor operations for the timed gradient all-reduce.

The bucketing and timing are `agent.trainer.frameworks.gradients`. Why not
`DistributedDataParallel`'s own all-reduce: DDP launches an asynchronous all-reduce per bucket
while backward is still computing earlier layers' gradients; that overlap hides most of the
communication on a large model but leaves no interval one could call "communication time".
Use no DDP, or backward inside `ddp.no_sync()`, so the comm/compute split the HPA metrics need
is measured here, at the cost of the overlap. On GPU the timing starts after
`torch.cuda.synchronize()`, so backward's kernels are not counted.

This module imports torch; the agent process never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from agent.trainer.frameworks.gradients import DEFAULT_BUCKET_BYTES, BucketedGradientAllReduce

__all__ = ["DEFAULT_BUCKET_BYTES", "GradientAllReduce", "broadcast_parameters"]


class GradientAllReduce(BucketedGradientAllReduce):
    """`BucketedGradientAllReduce` over torch tensors and `torch.distributed`."""

    @staticmethod
    def _trainable(parameter: Any) -> bool:
        return bool(parameter.requires_grad)

    @staticmethod
    def _device_synchronizer(parameters: list[Any]) -> Callable[[], None]:
        if any(p.is_cuda for p in parameters):
            return lambda: torch.cuda.synchronize()
        return lambda: None

    @staticmethod
    def _nbytes(tensor: Any) -> int:
        return int(tensor.numel()) * int(tensor.element_size())

    @staticmethod
    def _flatten(bucket: list[Any]) -> Any:
        return torch.cat([g.reshape(-1) for g in bucket])

    def _all_reduce(self, flat: Any) -> None:
        dist.all_reduce(flat, group=self._group)

    @staticmethod
    def _scatter_average(flat: Any, world_size: int, bucket: list[Any]) -> None:
        flat.div_(world_size)
        offset = 0
        for g in bucket:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def _reduce_context(self) -> Any:
        return torch.no_grad()


def broadcast_parameters(parameters: Iterable[Any], src: int = 0, group: Any = None) -> None:
    """Copies rank `src`'s parameters to every rank, so all ranks start identical."""
    with torch.no_grad():
        for p in parameters:
            dist.broadcast(p.data, src=src, group=group)
