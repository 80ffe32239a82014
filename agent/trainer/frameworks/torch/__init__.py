"""PyTorch: its launch environment (here, no torch import) and its `Collective`.

The only package that imports torch or says its variable names. A trainer is launched the way
``torchrun`` launches one worker per node: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK=0``,
``LOCAL_WORLD_SIZE=1``, ``MASTER_ADDR``, ``MASTER_PORT`` (rank 0 hosts the store there), plus
``EDL_TORCH_BACKEND`` (gloo on CPU, nccl on GPU; torch has no variable of its own for it).
`gradients` holds the timed gradient all-reduce a plain script uses; `collective` what
`ElasticTrainer` drives; `lazy_dynamo` the stand-in that keeps ``torch._dynamo`` out of an
eager trainer (``EDL_TORCH_LAZY_DYNAMO=0`` turns it off).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from agent.errors import ConfigError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.base import (
    Collective,
    Framework,
    generation_from_env,
    int_from_env,
    neutral_env,
)
from edl_common.options import SWITCH

ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_BACKEND = "EDL_TORCH_BACKEND"
ENV_LAZY_DYNAMO = "EDL_TORCH_LAZY_DYNAMO"
"""Off (0, false, no, off): the trainer loads ``torch._dynamo`` while it warms up, as before
the stand-in (`lazy_dynamo`); on (the default): only when something needs it."""
DATA_PARALLEL = "agent.trainer.data_parallel"
"""Imported by a script that uses `ElasticDataParallel` (``from agent.trainer import ...``):
DDP needs ``torch._dynamo``, so such a trainer loads it while it warms up, not in a pause."""


def lazy_dynamo_from_env(env: Mapping[str, str]) -> bool:
    """``EDL_TORCH_LAZY_DYNAMO`` (absent or empty: on); raises `ConfigError` on other text."""
    raw = env.get(ENV_LAZY_DYNAMO, "").strip()
    if not raw:
        return True
    try:
        return bool(SWITCH.parse(raw))
    except ConfigError as e:
        raise ConfigError(f"{ENV_LAZY_DYNAMO}={raw!r}: {e}") from None


@dataclass(frozen=True)
class Torch:
    """The `Framework` descriptor of PyTorch (torch.distributed)."""

    name: str = "torch"
    module: str = "torch"
    env_names: tuple[str, ...] = (ENV_RANK, ENV_WORLD_SIZE, ENV_MASTER_ADDR)

    def launch_env(self, world: TrainerWorld) -> dict[str, str]:
        """torch.distributed's variables for `world` (one local rank per pod)."""
        env = {
            ENV_RANK: str(world.rank),
            ENV_WORLD_SIZE: str(world.world_size),
            ENV_LOCAL_RANK: "0",
            ENV_LOCAL_WORLD_SIZE: "1",
            **neutral_env(world),
        }
        if world.master:
            host, port = world.master_host_port
            env[ENV_MASTER_ADDR], env[ENV_MASTER_PORT] = host, str(port)
        if world.backend:
            env[ENV_BACKEND] = world.backend
        return env

    def world_from_env(self, env: Mapping[str, str]) -> TrainerWorld:
        """The world from torch's variables (plus ``EDL_*``); absent means 1 rank.

        Per-rank endpoints are not part of torch's environment (only the master is).
        """
        addr = env.get(ENV_MASTER_ADDR, "").strip()
        port = env.get(ENV_MASTER_PORT, "").strip()
        return TrainerWorld(
            rank=int_from_env(env, ENV_RANK, 0),
            world_size=int_from_env(env, ENV_WORLD_SIZE, 1),
            generation=generation_from_env(env),
            master=f"{addr}:{port}" if addr and port else "",
            backend=env.get(ENV_BACKEND, "").strip(),
        )

    def collective(self) -> Collective:
        """`TorchCollective` (imports torch), with the dynamo stand-in unless switched off.

        Off too for a script that imported `ElasticDataParallel` before ``start()``: its DDP
        loads dynamo anyway, and a joiner would load it after joining, inside the survivors'
        pause (bench/bench_ddp.py: a 2 -> 3 rescale's state hand-off 24 -> 75 s on a loaded
        machine).
        """
        from agent.trainer.frameworks.torch.collective import TorchCollective

        lazy = lazy_dynamo_from_env(os.environ) and DATA_PARALLEL not in sys.modules
        return TorchCollective(lazy_dynamo=lazy)


FRAMEWORK: Framework = Torch()  # mypy checks the descriptor against the Protocol
