"""`ElasticDataParallel` for Paddle: bucketed gradient all-reduce launched from backward hooks.

What ``paddle.DataParallel`` does, on the group of each world the trainer joins: the
parameters' gradients are grouped into buckets (25 MB by default, ``comm_buffer_size`` in MB
as DataParallel's), in reverse order (the order backward produces them); a hook on every
parameter counts its gradient in once it is accumulated, and a bucket whose gradients are all
there is all-reduced at once, in bucket order, while backward computes the rest (on NCCL the
collectives run on their own stream; gloo runs each as it is launched). A final hook of the
backward pass waits for every bucket and writes the sums back into the gradients. These are
the hooks Paddle's own sharded data parallelism uses (``Tensor._register_backward_hook``,
``core.eager._add_backward_final_hook``); `tests/unit/agent/test_paddle_data_parallel.py`
fails if a Paddle version drops them.

Why not ``paddle.DataParallel`` itself: its reducer all-reduces inside Paddle's backward engine
in C++, where a lost peer's gloo error cannot reach Python (Paddle 3.3.1 aborts the process:
``terminate called after throwing an instance of 'gloo::IoException'``), so a survivor could
neither save its state nor tell its agent it lost a peer; and a DataParallel cannot be built
on an in-process group without its private fields, nor dropped (its hooks keep a raw pointer
to its reducer). Here every collective's failure is a Python exception, caught in the hook:
the trainer saves the committed state (the optimizer has not stepped) and exits with
PEER_LOST_EXIT (`DataParallelHost.peer_lost`).

Each bucket is multiplied by this rank's share of the step's global batch before a sum
all-reduce (`agent.trainer.data_parallel`). The exposed communication (last bucket ready ->
every all-reduce done) is recorded as `edl_trainer_comm_seconds_total`.

This module imports Paddle; the agent process never imports it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import paddle
import paddle.distributed as dist
from paddle.base import core

from agent.trainer.frameworks.arrays import buckets
from agent.trainer.frameworks.base import DataParallelHost

log = logging.getLogger(__name__)

OPTIONS = ("comm_buffer_size",)
"""The keywords this wrapper takes (``paddle.DataParallel``'s, in MB)."""


def _nbytes(tensor: Any) -> int:
    return int(tensor.size) * int(tensor.element_size())


class PaddleDataParallel(paddle.nn.Layer):
    """The user's layers with their gradients all-reduced in buckets during backward."""

    def __init__(
        self,
        layers: Any,
        host: DataParallelHost,
        group_of: Callable[[], Any],
        options: Mapping[str, Any],
    ) -> None:
        """`group_of()` is the current world's group (None: Paddle's default group)."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"ElasticDataParallel (Paddle) takes only {OPTIONS}, not {unknown}")
        super().__init__()
        self._layers = layers
        self._host = host
        self._group_of = group_of
        limit = int(float(options.get("comm_buffer_size", 25)) * 1024 * 1024)
        params = [p for p in layers.parameters() if not p.stop_gradient]
        self._buckets: list[list[Any]] = buckets(
            reversed(params), key=lambda p: str(p.dtype), nbytes=_nbytes, limit=limit
        )
        self._bucket_of: dict[int, int] = {}
        for index, bucket in enumerate(self._buckets):
            for p in bucket:
                self._bucket_of[id(p)] = index
                p._register_backward_hook(functools.partial(self._grad_ready, id(p)))
        self._armed = False
        self._pending: list[int] = []
        self._next = 0
        self._inflight: list[tuple[int, Any, Any]] = []  # bucket, flat sum, task
        self._failure: str | None = None
        self._failed = False
        self._ready_at = 0.0
        self._done_at = 0.0
        self._bytes = 0
        host.add_listener(self)
        host.on_step_end(self._record_comm)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """The layers' forward; arms the hooks for this step's backward (world > 1, training)."""
        outputs = self._layers(*inputs, **kwargs)
        if self._host.world_size > 1 and self.training and paddle.is_grad_enabled():
            self._arm()
        return outputs

    def _arm(self) -> None:
        self._armed = True
        self._pending = [len(b) for b in self._buckets]
        self._next = 0
        self._inflight = []
        self._failure = None
        core.eager._add_backward_final_hook(self._finish)  # type: ignore[no-untyped-call]

    def _grad_ready(self, key: int) -> None:
        """A parameter's gradient is accumulated: launch every bucket now complete, in order."""
        if not self._armed:
            return
        self._pending[self._bucket_of[key]] -= 1
        while self._next < len(self._buckets) and self._pending[self._next] == 0:
            self._launch(self._next)
            self._next += 1

    def _launch(self, index: int) -> None:
        if self._failure is not None:
            return  # a peer is gone: nothing more is sent
        try:
            bucket = self._buckets[index]
            grads = [p.grad if p.grad is not None else paddle.zeros_like(p) for p in bucket]
            flat = paddle.concat([g.reshape([-1]) for g in grads]) * self._host.share
            self._ready_at = time.perf_counter()
            self._bytes += _nbytes(flat)
            task = dist.all_reduce(flat, group=self._group_of(), sync_op=False)
            self._inflight.append((index, flat, task))
        except Exception as e:  # never out of a hook: Paddle's engine would abort on it
            self._fail(e)

    def _finish(self) -> None:
        """Backward's final hook: every bucket's sum back into the gradients."""
        self._armed = False
        try:
            while self._next < len(self._buckets):  # a parameter without a gradient here
                self._launch(self._next)
                self._next += 1
            with paddle.no_grad():
                for index, flat, task in self._inflight:
                    task.wait()
                    self._done_at = time.perf_counter()
                    if self._failure is None:
                        self._scatter(self._buckets[index], flat)
        except Exception as e:
            self._fail(e)
        self._inflight = []
        if self._failure is not None:
            self._host.peer_lost(f"gradient all-reduce failed: {self._failure}")

    @staticmethod
    def _scatter(bucket: list[Any], flat: Any) -> None:
        parts = paddle.split(flat, [int(p.size) for p in bucket])
        for p, part in zip(bucket, parts, strict=True):
            if p.grad is None:
                raise RuntimeError(
                    f"parameter {p.name} has no gradient on this rank but others do: every "
                    "trainable parameter must take part in each step's loss"
                )
            paddle.assign(part.reshape(p.grad.shape), output=p.grad)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = str(error).splitlines()[0] if str(error) else type(error).__name__
        self._failed = True
        log.error("gradient all-reduce failed: %s", self._failure)

    def _record_comm(self) -> None:
        """At the step's end: the exposed communication of its backward."""
        if self._bytes:
            seconds = max(0.0, self._done_at - self._ready_at)
            self._host.recorder.record_comm(seconds, self._bytes)
        self._bytes = 0

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The layers' state dict (as ``paddle.DataParallel``'s: no prefix)."""
        return self._layers.state_dict(*args, **kwargs)

    def set_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """Loads into the layers (as ``paddle.DataParallel``)."""
        return self._layers.set_state_dict(*args, **kwargs)

    # -- world changes (`WorldListener`): the next step's collectives use the new group --------

    def world_ending(self) -> None:
        """Nothing holds the old group between steps."""

    def world_ready(self) -> None:
        """The next bucket all-reduces on the new group (`group_of`)."""

    def communication_failed(self) -> bool:
        """A gradient all-reduce failed (the trainer exits at the end of that backward)."""
        return self._failed
