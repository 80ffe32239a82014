"""`Collective` over torch.distributed: what `ElasticTrainer` runs on a PyTorch trainer.

Every generation, in a fresh process or in-process alike, gets a fresh default process group
over a fresh `TCPStore` (rank 0 hosts it on the generation's master endpoint), wrapped in a
`PrefixStore` named after the generation; the previous group is destroyed first and its store
dropped, which frees its port for the generation after next (ports alternate). A store reused
across `destroy_process_group` + `init_process_group` hangs in the store-based barrier
(pytorch/pytorch#55967): the fresh store avoids that, the prefix would too.

In-process re-initialisation is offered on gloo only, after a self-test on the installed torch
forms, uses and destroys two groups in a row; NCCL takes the process-restart path (a new
process per generation), as does any trainer whose self-test fails.
This module imports torch; the agent process never imports it.
"""

from __future__ import annotations

import datetime
import socket
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist

from agent.protocol.world import TrainerWorld
from agent.recording import StepRecorder
from agent.trainer.frameworks.arrays import ArrayCollective
from agent.trainer.frameworks.base import ReduceOp, Reducer
from agent.trainer.frameworks.torch.gradients import GradientAllReduce

_OPS = {ReduceOp.MAX: dist.ReduceOp.MAX, ReduceOp.MIN: dist.ReduceOp.MIN}
SELF_TEST_SECONDS = 10.0


def to_numpy(value: Any) -> Any:
    """A state dict with every tensor replaced by a (CPU) numpy array."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_numpy(v) for v in value)
    return value


def to_torch(value: Any) -> Any:
    """Inverse of `to_numpy` (arrays become CPU tensors; torch moves them where they belong)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_torch(v) for v in value)
    return value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TorchCollective(ArrayCollective):
    """One PyTorch trainer's collective across the generations it lives through."""

    def __init__(self) -> None:
        self._store: Any = None  # this generation's TCPStore (dropped with its group)
        self._device = torch.device("cpu")

    def self_test(self, backend: str) -> str | None:
        """None when this torch can re-form a gloo group in-process; else why not (one line).

        Forms a one-rank group on a free loopback port, all-reduces, destroys it, and does it
        again with a fresh store (tens of milliseconds), so a torch that cannot is caught at
        start, not during the first rescale.
        """
        if backend != "gloo":
            return f"backend {backend or 'auto'} (only gloo re-initialises in-process)"
        if not dist.is_available() or not dist.is_gloo_available():
            return "this torch has no gloo"
        try:
            for generation in (1, 2):
                world = TrainerWorld(generation=generation, master=f"127.0.0.1:{_free_port()}")
                self._form(world, "gloo", SELF_TEST_SECONDS)
                probe = torch.tensor([2.0])
                dist.all_reduce(probe)
                self._leave()
                if float(probe.item()) != 2.0:
                    return "self-test all-reduce gave a wrong result"
        except Exception as e:
            self._leave()
            return f"self-test failed: {e}"
        return None

    def init(self, world: TrainerWorld, in_process: bool, timeout_seconds: float) -> None:
        """Leaves the previous group (if any), then forms this generation's (world > 1)."""
        self._leave()
        if world.world_size > 1:
            self._form(world, world.backend or "gloo", timeout_seconds)

    def _form(self, world: TrainerWorld, backend: str, timeout_seconds: float) -> None:
        host, port = world.master_host_port
        timeout = datetime.timedelta(seconds=timeout_seconds)
        store = dist.TCPStore(
            host, port, world.world_size, world.rank == 0, timeout, wait_for_workers=False
        )
        dist.init_process_group(
            backend,
            store=dist.PrefixStore(f"edl/g{world.generation}/", store),
            rank=world.rank,
            world_size=world.world_size,
            timeout=timeout,
        )
        self._store = store
        if backend == "nccl":
            self._device = torch.device("cuda", torch.cuda.current_device())

    def _leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self._store = None

    def _all_reduce(self, values: npt.NDArray[np.int64], op: ReduceOp) -> npt.NDArray[np.int64]:
        tensor = torch.from_numpy(values).to(self._device)
        dist.all_reduce(tensor, op=_OPS[op])
        result: npt.NDArray[np.int64] = tensor.cpu().numpy()
        return result

    def _broadcast(self, array: npt.NDArray[Any], src: int) -> npt.NDArray[Any]:
        tensor = torch.from_numpy(np.array(array)).to(self._device)
        dist.broadcast(tensor, src=src)
        result: npt.NDArray[Any] = tensor.cpu().numpy()
        return result

    def gradient_all_reduce(self, model: Any, recorder: StepRecorder, world_size: int) -> Reducer:
        """`GradientAllReduce` over this generation's (default) group."""
        return GradientAllReduce(model.parameters(), recorder, world_size)

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
        """`load_state_dict` with the arrays turned back into tensors."""
        model.load_state_dict(to_torch(model_state))
        if optimizer_state:
            optimizer.load_state_dict(to_torch(optimizer_state))
