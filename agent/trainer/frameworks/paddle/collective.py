"""`Collective` over Paddle's collectives: what `ElasticTrainer` runs on a Paddle trainer.

Process-restart mode forms the default group with `init_parallel_env` (which reads the
``PADDLE_*`` environment: the agent's, with ``PADDLE_MASTER`` set to the generation's fresh
store endpoint); in-process mode forms one gloo group per
generation through `inprocess.form_group` and passes it to every collective explicitly.
This module imports Paddle; the agent process never imports it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np
import numpy.typing as npt
import paddle
import paddle.distributed as dist

from agent.protocol.trainer_world import TrainerWorld
from agent.recording import StepRecorder
from agent.trainer.frameworks.arrays import ArrayCollective
from agent.trainer.frameworks.base import ReduceOp, Reducer
from agent.trainer.frameworks.paddle import FRAMEWORK
from agent.trainer.frameworks.paddle.gradients import GradientAllReduce
from agent.trainer.frameworks.paddle.inprocess import Generations, form_group, self_test
from agent.trainer.frameworks.paddle.store_nodelay import StoreNoDelay

_OPS: dict[ReduceOp, Any] = {ReduceOp.MAX: dist.ReduceOp.MAX, ReduceOp.MIN: dist.ReduceOp.MIN}


def to_numpy(value: Any) -> Any:
    """A state dict with every Paddle tensor replaced by a numpy array (picklable, portable)."""
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_numpy(v) for v in value)
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return value.numpy()
    return value


class PaddleCollective(ArrayCollective):
    """One Paddle trainer's collective across the generations it lives through."""

    def __init__(self) -> None:
        self._generations = Generations()  # in-process: the current group and its store
        self._group: Any = None  # None: Paddle's default group (process-restart mode)

    def self_test(self, backend: str) -> str | None:
        """See `inprocess.self_test`."""
        return self_test(backend)

    def init(self, world: TrainerWorld, in_process: bool, timeout_seconds: float) -> None:
        """A group of this generation (in-process), or Paddle's default one from the env."""
        self._group = None
        if in_process:
            self._generations.release()  # a world of one forms no group, but ends the last
        if world.world_size == 1:
            return
        if in_process:
            self._group = form_group(world, int(timeout_seconds), self._generations).group
        else:
            os.environ.update(FRAMEWORK.launch_env(world))  # its store: at world.master
            host, _, port = world.master.rpartition(":")
            with StoreNoDelay(int(port)) if host and port.isdigit() else contextlib.nullcontext():
                dist.init_parallel_env()

    def _all_reduce(self, values: npt.NDArray[np.int64], op: ReduceOp) -> npt.NDArray[np.int64]:
        tensor = paddle.to_tensor(values, dtype="int64")
        dist.all_reduce(tensor, op=_OPS[op], group=self._group)
        result: npt.NDArray[np.int64] = tensor.numpy()
        return result

    def _broadcast(self, array: npt.NDArray[Any], src: int) -> npt.NDArray[Any]:
        tensor = paddle.to_tensor(array)
        dist.broadcast(tensor, src=src, group=self._group)
        result: npt.NDArray[Any] = tensor.numpy()
        return result

    def gradient_all_reduce(self, model: Any, recorder: StepRecorder, world_size: int) -> Reducer:
        """`GradientAllReduce` over this generation's group."""
        return GradientAllReduce(model.parameters(), recorder, world_size, self._group)

    def save_state(self, model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """`state_dict()`s with tensors as numpy arrays."""
        return to_numpy(model.state_dict()), to_numpy(optimizer.state_dict())

    def load_state(
        self,
        model: Any,
        optimizer: Any,
        model_state: dict[str, Any],
        optimizer_state: dict[str, Any],
    ) -> None:
        """`set_state_dict` (Paddle takes numpy arrays as they are)."""
        model.set_state_dict(model_state)
        if optimizer_state:
            optimizer.set_state_dict(optimizer_state)
