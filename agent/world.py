"""The collective world as one trainer incarnation sees it, from Paddle's environment.

The agent owns the world and passes it to the trainer through environment variables; the
trainer reads it back with `TrainerWorld.from_env`. Keeping both directions in one class means the
names cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.errors import ConfigError

ENV_RANK = "PADDLE_TRAINER_ID"
ENV_WORLD_SIZE = "PADDLE_TRAINERS_NUM"
ENV_ENDPOINTS = "PADDLE_TRAINER_ENDPOINTS"
ENV_CURRENT_ENDPOINT = "PADDLE_CURRENT_ENDPOINT"
ENV_MASTER = "PADDLE_MASTER"
ENV_BACKEND = "PADDLE_DISTRI_BACKEND"
ENV_GENERATION = "EDL_GENERATION"


def _int_from_env(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise ConfigError(f"{name}={raw!r} is not an integer") from e


@dataclass(frozen=True)
class TrainerWorld:
    """Who trains together: this rank's place in a world of `world_size` ranks.

    `generation` grows by one at every world change, so metrics and logs from different
    worlds can be told apart even when the size stays the same.
    """

    rank: int = 0
    """This trainer's rank, 0 .. world_size-1 (`PADDLE_TRAINER_ID`)."""
    world_size: int = 1
    """Number of ranks in the collective (`PADDLE_TRAINERS_NUM`)."""
    generation: int = 0
    """Generation of this world (`EDL_GENERATION`)."""
    endpoints: tuple[str, ...] = ()
    """`host:port` of every rank, in rank order (`PADDLE_TRAINER_ENDPOINTS`)."""
    current_endpoint: str = ""
    """This rank's own endpoint (`PADDLE_CURRENT_ENDPOINT`)."""
    master: str = ""
    """`host:port` of the rendezvous store (`PADDLE_MASTER`)."""
    backend: str = ""
    """Collective backend, `gloo` on CPU, `nccl` on GPU (`PADDLE_DISTRI_BACKEND`)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ConfigError(f"world size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside a world of {self.world_size}")
        if self.generation < 0:
            raise ConfigError(f"generation must be >= 0, got {self.generation}")
        if self.endpoints and len(self.endpoints) != self.world_size:
            raise ConfigError(
                f"{len(self.endpoints)} trainer endpoints for a world of {self.world_size}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TrainerWorld:
        """Reads the world from Paddle's variables (plus `EDL_GENERATION`); absent means 1 rank."""
        endpoints = tuple(e for e in env.get(ENV_ENDPOINTS, "").split(",") if e.strip())
        return cls(
            rank=_int_from_env(env, ENV_RANK, 0),
            world_size=_int_from_env(env, ENV_WORLD_SIZE, 1),
            generation=_int_from_env(env, ENV_GENERATION, 0),
            endpoints=tuple(e.strip() for e in endpoints),
            current_endpoint=env.get(ENV_CURRENT_ENDPOINT, "").strip(),
            master=env.get(ENV_MASTER, "").strip(),
            backend=env.get(ENV_BACKEND, "").strip(),
        )

    def to_env(self) -> dict[str, str]:
        """The environment a trainer of this world starts with (empty fields are left out)."""
        env = {
            ENV_RANK: str(self.rank),
            ENV_WORLD_SIZE: str(self.world_size),
            ENV_GENERATION: str(self.generation),
        }
        if self.endpoints:
            env[ENV_ENDPOINTS] = ",".join(self.endpoints)
        if self.current_endpoint:
            env[ENV_CURRENT_ENDPOINT] = self.current_endpoint
        if self.master:
            env[ENV_MASTER] = self.master
        if self.backend:
            env[ENV_BACKEND] = self.backend
        return env
