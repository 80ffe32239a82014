"""One rank of a data-parallel test world, run as a process: ``python -m ... FRAMEWORK CASE``.

Forms a real gloo world with its peers (the framework's own way, from the environment the test
sets), wraps a small model in the framework's `ElasticDataParallel` model with a stand-in for
the trainer (`Host`), and prints one JSON line of what it saw. Cases:

- ``uneven``: each rank trains its share of a global batch split unevenly (one rank's share
  may be empty: it computes on a stand-in sample weighted 0); the gradients must be the
  global batch's mean gradient, as one process computes it. Then the world "changes" (the
  same ranks, a new group: DDP dropped and rebuilt) and a second step must agree again.
- ``lose``: the last rank dies before its backward; the others must see the failure as a lost
  peer (`communication_failed`, or the host's `peer_lost` for Paddle), never an abort.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from agent.trainer.recording import StepRecorder

GLOBAL = [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
"""The global batch of 10 samples, split 4/3/3 over 3 ranks (rank r trains GLOBAL[r])."""
TINY = [[0], [1], []]
"""A global batch of 2 over 3 ranks: rank 2's share is empty."""
PEER_LOST_EXIT = 76


def data(seed: int = 7) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((10, 6)).astype(np.float32)
    y = rng.integers(0, 3, 10).astype(np.int64)
    return x, y


class Host:
    """The trainer as a data-parallel model sees it."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.share = 1.0
        self.recorder = StepRecorder()
        self.listeners: list[Any] = []
        self.hooks: list[Callable[[], None]] = []

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def on_step_end(self, hook: Callable[[], None]) -> None:
        self.hooks.append(hook)

    def peer_lost(self, why: str) -> None:
        print(json.dumps({"peer_lost": why}), flush=True)
        os._exit(PEER_LOST_EXIT)


def grad_of(parameter: Any) -> list[float]:
    """A parameter's gradient, flat (Paddle's `.grad` is typed optional)."""
    grad = parameter.grad
    assert grad is not None, parameter.name
    values: list[float] = grad.numpy().flatten().tolist()
    return values


def torch_rank(case: str, rank: int, size: int, port: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from agent.trainer.frameworks.torch.data_parallel import TorchDataParallel

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, size, rank == 0, datetime.timedelta(seconds=60))

    def form(generation: int) -> None:
        prefix = dist.PrefixStore(f"g{generation}/", store)
        dist.init_process_group("gloo", store=prefix, rank=rank, world_size=size)

    form(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    reference = [p.detach().clone() for p in model.parameters()]
    host = Host(size)
    wrapped = TorchDataParallel(model, host, {})
    x, y = data()
    out: dict[str, Any] = {"ddp": wrapped.ddp is not None}

    def step(split: list[list[int]]) -> list[list[float]]:
        ids = split[rank] or [split[0][0]]  # an empty share computes on a stand-in
        host.share = len(split[rank]) / sum(len(s) for s in split)
        loss = F.cross_entropy(wrapped(torch.from_numpy(x[ids])), torch.from_numpy(y[ids]))
        loss.backward()
        for hook in host.hooks:
            hook()
        grads = [p.grad.flatten().tolist() for p in model.parameters()]
        # DDP's buckets are the gradients (no copy in and out): each .grad a view of one
        views.append(
            wrapped.ddp is not None and all(p.grad._base is not None for p in model.parameters())
        )
        model.zero_grad()
        return grads

    views: list[bool] = []
    if case == "lose":
        if rank == size - 1:
            os._exit(9)
        try:
            step(GLOBAL)
        except Exception as e:
            out["raised"] = type(e).__name__
        out["failed"] = wrapped.communication_failed()
        return out
    out["uneven"] = step(GLOBAL)
    out["tiny"] = step(TINY)
    wrapped.world_ending()
    dist.destroy_process_group()
    form(2)
    wrapped.world_ready()
    out["rebuilt"] = step(GLOBAL)
    snap = host.recorder.snapshot()
    out["comm_bytes"], out["comm_calls"] = snap.comm_bytes, snap.comm_calls
    out["grads_in_buckets"] = views
    with torch.no_grad():  # one process, the whole batch: what every rank must have
        for p, p0 in zip(model.parameters(), reference, strict=True):
            p.copy_(p0)
    out["one_process"] = {}
    for name, split in (("uneven", GLOBAL), ("tiny", TINY)):
        ids = [i for s in split for i in s]
        loss = F.cross_entropy(model(torch.from_numpy(x[ids])), torch.from_numpy(y[ids]))
        loss.backward()
        out["one_process"][name] = [p.grad.flatten().tolist() for p in model.parameters()]
        model.zero_grad()
    return out


def paddle_rank(case: str, rank: int, size: int, port: int) -> dict[str, Any]:
    endpoints = [f"127.0.0.1:{port + 1 + i}" for i in range(size)]
    os.environ.update(
        PADDLE_TRAINER_ID=str(rank),
        PADDLE_TRAINERS_NUM=str(size),
        PADDLE_TRAINER_ENDPOINTS=",".join(endpoints),
        PADDLE_CURRENT_ENDPOINT=endpoints[rank],
        PADDLE_MASTER=f"127.0.0.1:{port}",
        PADDLE_DISTRI_BACKEND="gloo",
    )
    import paddle
    import paddle.distributed as dist
    import paddle.nn.functional as F

    from agent.trainer.frameworks.paddle.data_parallel import PaddleDataParallel

    dist.init_parallel_env()
    paddle.seed(0)
    model = paddle.nn.Sequential(paddle.nn.Linear(6, 5), paddle.nn.Tanh(), paddle.nn.Linear(5, 3))
    reference = [p.numpy().copy() for p in model.parameters()]
    host = Host(size)
    wrapped = PaddleDataParallel(model, host, lambda: None, {"comm_buffer_size": 0.0001})
    x, y = data()
    out: dict[str, Any] = {"buckets": len(wrapped._buckets)}

    def step(split: list[list[int]]) -> list[list[float]]:
        ids = split[rank] or [split[0][0]]
        host.share = len(split[rank]) / sum(len(s) for s in split)
        loss = F.cross_entropy(wrapped(paddle.to_tensor(x[ids])), paddle.to_tensor(y[ids]))
        loss.backward()
        for hook in host.hooks:
            hook()
        grads = [grad_of(p) for p in model.parameters()]
        model.clear_gradients()
        return grads

    if case == "lose":
        if rank == size - 1:
            os._exit(9)
        step(GLOBAL)  # the host's peer_lost ends this process
        out["no_peer_lost"] = True
        return out
    out["uneven"] = step(GLOBAL)
    out["tiny"] = step(TINY)
    snap = host.recorder.snapshot()
    out["comm_bytes"], out["comm_calls"] = snap.comm_bytes, snap.comm_calls
    for p, p0 in zip(model.parameters(), reference, strict=True):
        p.set_value(p0)
    out["one_process"] = {}
    for name, split in (("uneven", GLOBAL), ("tiny", TINY)):
        ids = [i for s in split for i in s]
        loss = F.cross_entropy(model(paddle.to_tensor(x[ids])), paddle.to_tensor(y[ids]))
        loss.backward()
        out["one_process"][name] = [grad_of(p) for p in model.parameters()]
        model.clear_gradients()
    return out


def main() -> None:
    framework, case, rank, size, port = sys.argv[1:6]
    run = torch_rank if framework == "torch" else paddle_rank
    print(json.dumps(run(case, int(rank), int(size), int(port))), flush=True)


if __name__ == "__main__":
    main()
