"""`ElasticDataParallel` for PyTorch: ``DistributedDataParallel`` on each world's group.

The wrapper is an ``nn.Module`` around the user's module (``.module``, as DDP's, so its state
dict has DDP's ``module.`` keys). In a world of more than one rank its training forward runs
through a ``DistributedDataParallel`` built on that world's (default) process group, with
DDP's buckets and the all-reduce it launches from backward hooks, overlapped with the rest
of backward. On a world change the DDP is dropped before the old group is destroyed and
built again on the new group once the state is agreed, never with DDP's start-up broadcast
(``init_sync=False``): the state hand-off makes every rank equal, a fresh job's included
(rank 0's model), and a joiner's collectives must be the ones the survivors run, the
hand-off's. A world of one rank, and evaluation (``eval()`` or no grad), run the module
itself.

The gradient weighting is a DDP communication hook (the documented ``register_comm_hook``):
each bucket is multiplied by this rank's share of the step's global batch and all-reduced
with a sum, where DDP's default hook divides by the world size. With a mean-reduced loss the
result is the global batch's mean gradient for any split, and exactly DDP's average for an
even one. The hook also times the *exposed* communication: from the moment the last bucket
was ready (backward's compute is over) until the last all-reduce completed, the part of the
step spent waiting for the network (`edl_trainer_comm_seconds_total`); the overlapped part is
hidden and not counted. A failed all-reduce marks the wrapper (`communication_failed`): the
exception that ends the script is then a lost peer, not a crash.

DDP is built with ``gradient_as_bucket_view=True`` unless the caller passes it: each
parameter's ``.grad`` is a view into DDP's bucket, so the hook's multiply is the one pass over
the gradients (with copies, DDP copies each gradient into its bucket, the hook multiplies the
bucket, and DDP copies the result back: plain DDP's default hook fuses its divide into the
first copy, so the weighting would cost EDL one more pass than plain DDP).

This module imports torch; the agent process never imports it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from agent.trainer.frameworks.base import DataParallelHost


class TorchDataParallel(torch.nn.Module):  # type: ignore[misc]  # torch is untyped here
    """The user's module under DDP in every world of its trainer (see the module)."""

    def __init__(
        self, module: torch.nn.Module, host: DataParallelHost, options: Mapping[str, Any]
    ) -> None:
        super().__init__()
        self.module = module
        self._host = host
        if "init_sync" in options or "process_group" in options:
            raise TypeError(
                "ElasticDataParallel decides DDP's init_sync and process_group (each world's)"
            )
        # Gradients as views of DDP's buckets unless the caller says otherwise: the hook works
        # on the bucket, so DDP's copy of each gradient into it before the all-reduce, and back
        # after, would be two passes over every gradient that plain DDP fuses into one.
        self._options = {"gradient_as_bucket_view": True, **options}
        self._failed = False
        self._ready: list[float] = []
        self._done: list[float] = []
        self._bytes = 0
        self._set_ddp(None)
        host.add_listener(self)
        host.on_step_end(self._record_comm)
        self._build()

    @property
    def ddp(self) -> DistributedDataParallel | None:
        """The DDP of the current world (None in a world of one)."""
        ddp: DistributedDataParallel | None = self.__dict__["_ddp"]
        return ddp

    def _set_ddp(self, ddp: DistributedDataParallel | None) -> None:
        # Not a submodule: the state dict holds the module once, under `module.`.
        object.__setattr__(self, "_ddp", ddp)

    def _build(self) -> None:
        if self._host.world_size == 1 or not dist.is_initialized():
            self._set_ddp(None)
            return
        # No start-up broadcast: the state hand-off makes every rank equal (and a joiner's
        # collectives must be the survivors': theirs are the hand-off's, not DDP's).
        ddp = DistributedDataParallel(self.module, init_sync=False, **self._options)
        # DDP inspects the hook's signature: a parameter named `bucket`, annotated with
        # dist.GradBucket itself or not at all (a lambda: this module's annotations are text).
        ddp.register_comm_hook(None, lambda state, bucket: self._all_reduce(bucket))
        self._set_ddp(ddp)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Through the world's DDP while training, else the module itself."""
        ddp = self.ddp
        if ddp is None or not (self.training and torch.is_grad_enabled()):
            return self.module(*args, **kwargs)
        return ddp(*args, **kwargs)

    # -- the communication hook ---------------------------------------------------------------

    def _all_reduce(self, bucket: Any) -> Any:
        """DDP's communication hook: weight, then sum (a future of the reduced bucket)."""
        buffer = bucket.buffer()
        buffer.mul_(self._host.share)
        self._ready.append(time.perf_counter())
        self._bytes += buffer.numel() * buffer.element_size()
        return dist.all_reduce(buffer, async_op=True).get_future().then(self._reduced)

    def _reduced(self, future: Any) -> Any:
        """Runs when a bucket's all-reduce is over (on the backend's thread)."""
        try:
            tensor = future.value()[0]
        except Exception:
            self._failed = True
            raise
        self._done.append(time.perf_counter())
        return tensor

    def _record_comm(self) -> None:
        """At the step's end: the exposed communication of its backward (see the module)."""
        ready, done, nbytes = self._ready, self._done, self._bytes
        self._ready, self._done, self._bytes = [], [], 0
        if ready and done:
            self._host.recorder.record_comm(max(0.0, max(done) - max(ready)), nbytes)

    # -- world changes (`WorldListener`) --------------------------------------------------------

    def world_ending(self) -> None:
        """Drops the DDP before its process group is destroyed."""
        self._set_ddp(None)

    def world_ready(self) -> None:
        """A DDP on the new world's group (the state hand-off already synced every rank)."""
        self._build()

    def communication_failed(self) -> bool:
        """An all-reduce of this model failed (a peer died or left mid-step)."""
        return self._failed
