"""`Collective` over torch.distributed: what `ElasticTrainer` runs on a PyTorch trainer.

Every generation, in a fresh process or in-process alike, gets a fresh default process group
(the previous one is destroyed first) over a `PrefixStore` named after the generation. A store
reused across `destroy_process_group` + `init_process_group` without a new prefix hangs in the
store-based barrier (pytorch/pytorch#55967: the group counter restarts while the old keys are
still there); the per-generation prefix makes every generation's keys new. Rank 0 hosts the
`TCPStore` of its generation on the port the rendezvous held for it (`agent.trainer.rendezvous`:
a fresh one every generation) and drops it with the group when the next generation forms, so
an in-process trainer keeps one listening store, not one per generation it hosted (issue 37).
Other ranks connect a new client every generation.

In-process re-initialisation is offered on gloo only, after a self-test on the installed torch
forms, uses and destroys two groups in a row; NCCL takes the process-restart path (a new
process per generation), as does any trainer whose self-test fails.
This module imports torch; the agent process never imports it.
"""

from __future__ import annotations

import datetime
import importlib
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist

from agent.protocol.trainer_world import TrainerWorld
from agent.recording import StepRecorder
from agent.trainer.frameworks.arrays import ArrayCollective
from agent.trainer.frameworks.base import ReduceOp, Reducer
from agent.trainer.frameworks.torch.gradients import GradientAllReduce
from agent.trainer.frameworks.torch.lazy_dynamo import install as install_lazy_dynamo
from edl_common.ports import hold_port

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


class TorchCollective(ArrayCollective):
    """One PyTorch trainer's collective across the generations it lives through."""

    def __init__(self, lazy_dynamo: bool = True) -> None:
        self._server: Any = None  # rank 0: the TCPStore of the current generation
        self._device = torch.device("cpu")
        # torch.optim needs torch._dynamo from the first optimizer built on (~900 modules,
        # 1-2 s here), for calls that do nothing in eager mode: the stand-in answers them and
        # loads the real module only for a script that compiles (`lazy_dynamo`). Without it,
        # or where the script loaded dynamo already, it is loaded now, before a warm joiner
        # joins, which keeps it out of the survivors' pause (they wait for the joiner's
        # register(), which comes after this).
        if not (lazy_dynamo and install_lazy_dynamo(torch) is not None):
            importlib.import_module("torch._dynamo")

    def self_test(self, backend: str) -> str | None:
        """None when this torch can re-form a gloo group in-process; else why not (one line).

        Forms a one-rank group on a port held free on every address (the store binds the
        wildcard), all-reduces, destroys it, and forms the next generation's over the same
        store under a new prefix (tens of milliseconds), so a torch that cannot is caught at
        start, not during the first rescale.
        """
        if backend != "gloo":
            return f"backend {backend or 'auto'} (only gloo re-initialises in-process)"
        if not dist.is_available() or not dist.is_gloo_available():
            return "this torch has no gloo"
        try:
            with hold_port() as held:
                held.share()
                master = f"127.0.0.1:{held.port}"
                for generation in (1, 2):
                    world = TrainerWorld(generation=generation, master=master)
                    self._form(world, "gloo", SELF_TEST_SECONDS)
                    probe = torch.tensor([2.0])
                    dist.all_reduce(probe)
                    self._leave()
                    if float(probe.item()) != 2.0:
                        return "self-test all-reduce gave a wrong result"
        except Exception as e:
            self._leave()
            return f"self-test failed: {e}"
        finally:
            self._server = None  # a real job's stores are others
        return None

    def init(self, world: TrainerWorld, in_process: bool, timeout_seconds: float) -> None:
        """Leaves the previous group and drops its store, then forms this one's (world > 1)."""
        self._leave()
        self._server = None
        if world.world_size > 1:
            self._form(world, world.backend or "gloo", timeout_seconds)

    def _form(self, world: TrainerWorld, backend: str, timeout_seconds: float) -> None:
        host, port = world.master_host_port
        timeout = datetime.timedelta(seconds=timeout_seconds)
        store = self._server if world.rank == 0 else None  # the self-test's second round
        if store is None:
            store = dist.TCPStore(
                host, port, world.world_size, world.rank == 0, timeout, wait_for_workers=False
            )
            if world.rank == 0:
                self._server = store
        dist.init_process_group(
            backend,
            store=dist.PrefixStore(f"edl/g{world.generation}/", store),
            rank=world.rank,
            world_size=world.world_size,
            timeout=timeout,
        )
        if backend == "nccl":
            self._device = torch.device("cuda", torch.cuda.current_device())

    def _leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def _all_reduce(self, values: npt.NDArray[np.int64], op: ReduceOp) -> npt.NDArray[np.int64]:
        tensor = torch.from_numpy(values).to(self._device)
        dist.all_reduce(tensor, op=_OPS[op])
        result: npt.NDArray[np.int64] = tensor.cpu().numpy()
        return result

    def _broadcast(self, array: npt.NDArray[Any], src: int) -> npt.NDArray[Any]:
        if array.flags.writeable:
            tensor = torch.from_numpy(np.ascontiguousarray(array))  # no copy: received into
        else:  # the sender's read-only bytes: the broadcast only reads them here
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The given NumPy array is not writable")
                tensor = torch.from_numpy(np.ascontiguousarray(array))
        tensor = tensor.to(self._device)
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
