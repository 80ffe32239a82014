"""PaddlePaddle: its launch environment (here, no Paddle import) and its `Collective`.

The only package that says ``PADDLE_*`` or imports Paddle: `gradients` (the timed gradient
all-reduce a plain script uses), `inprocess` (re-forming gloo groups through private APIs,
version-gated) and `collective` (what `ElasticTrainer` drives). A trainer learns its world from
`PADDLE_TRAINER_ID`, `PADDLE_TRAINERS_NUM`, `PADDLE_TRAINER_ENDPOINTS`,
`PADDLE_CURRENT_ENDPOINT`, `PADDLE_MASTER` and `PADDLE_DISTRI_BACKEND` (gloo on CPU, NCCL on
GPU), which `paddle.distributed.init_parallel_env()` reads too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.base import (
    Collective,
    Framework,
    generation_from_env,
    int_from_env,
    neutral_env,
)

ENV_RANK = "PADDLE_TRAINER_ID"
ENV_WORLD_SIZE = "PADDLE_TRAINERS_NUM"
ENV_ENDPOINTS = "PADDLE_TRAINER_ENDPOINTS"
ENV_CURRENT_ENDPOINT = "PADDLE_CURRENT_ENDPOINT"
ENV_MASTER = "PADDLE_MASTER"
ENV_BACKEND = "PADDLE_DISTRI_BACKEND"


@dataclass(frozen=True)
class Paddle:
    """The `Framework` descriptor of PaddlePaddle."""

    name: str = "paddle"
    module: str = "paddle"
    env_names: tuple[str, ...] = (ENV_RANK, ENV_WORLD_SIZE, ENV_ENDPOINTS, ENV_MASTER)

    def launch_env(self, world: TrainerWorld) -> dict[str, str]:
        """Paddle's variables for `world` (empty fields are left out)."""
        env = {
            ENV_RANK: str(world.rank),
            ENV_WORLD_SIZE: str(world.world_size),
            **neutral_env(world),
        }
        if world.endpoints:
            env[ENV_ENDPOINTS] = ",".join(world.endpoints)
        if world.current_endpoint:
            env[ENV_CURRENT_ENDPOINT] = world.current_endpoint
        if world.master:
            env[ENV_MASTER] = world.master
        if world.backend:
            env[ENV_BACKEND] = world.backend
        return env

    def world_from_env(self, env: Mapping[str, str]) -> TrainerWorld:
        """The world from Paddle's variables (plus `EDL_GENERATION`); absent means 1 rank."""
        endpoints = tuple(e.strip() for e in env.get(ENV_ENDPOINTS, "").split(",") if e.strip())
        return TrainerWorld(
            rank=int_from_env(env, ENV_RANK, 0),
            world_size=int_from_env(env, ENV_WORLD_SIZE, 1),
            generation=generation_from_env(env),
            endpoints=endpoints,
            current_endpoint=env.get(ENV_CURRENT_ENDPOINT, "").strip(),
            master=env.get(ENV_MASTER, "").strip(),
            backend=env.get(ENV_BACKEND, "").strip(),
        )

    def collective(self) -> Collective:
        """`PaddleCollective` (imports Paddle)."""
        from agent.trainer.frameworks.paddle.collective import PaddleCollective

        return PaddleCollective()


FRAMEWORK: Framework = Paddle()  # mypy checks the descriptor against the Protocol
