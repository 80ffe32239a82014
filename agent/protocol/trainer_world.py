"""The collective world one trainer incarnation runs in, in no framework's vocabulary.

The agent decides the world; at launch a framework maps it to its own environment
(`agent.trainer.frameworks.<name>.launch_env`), and the trainer reads it back through the same
framework. In-process re-initialisation hands it over as JSON (`to_dict` / `from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from agent.errors import ConfigError


@dataclass(frozen=True)
class TrainerWorld:
    """Who trains together: this rank's place in a world of `world_size` ranks.

    `generation` grows by one at every world change, so metrics and logs from different
    worlds can be told apart even when the size stays the same.
    """

    rank: int = 0
    """This trainer's rank, 0 .. world_size-1."""
    world_size: int = 1
    """Number of ranks in the collective."""
    generation: int = 0
    """Generation of this world (0: a warm stand-by, or a run without elastic training)."""
    endpoints: tuple[str, ...] = ()
    """`host:port` of every rank, in rank order."""
    current_endpoint: str = ""
    """This rank's own endpoint."""
    master: str = ""
    """`host:port` of the rendezvous store (rank 0's endpoint of this generation)."""
    backend: str = ""
    """Collective backend: `gloo` on CPU, `nccl` on GPU."""

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

    @property
    def master_host_port(self) -> tuple[str, int]:
        """`master` split into host and port.

        Raises:
            ConfigError: there is no master, or its port is not a number.
        """
        host, _, port = self.master.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"master {self.master!r} is not host:port")
        return host, int(port)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the control channel's form)."""
        body = asdict(self)
        body["endpoints"] = list(self.endpoints)
        return body

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrainerWorld:
        """Inverse of `to_dict`.

        Raises:
            ConfigError: a field is missing, of the wrong type, or the world is inconsistent.
        """
        try:
            return cls(
                rank=int(raw["rank"]),
                world_size=int(raw["world_size"]),
                generation=int(raw["generation"]),
                endpoints=tuple(str(e) for e in raw.get("endpoints") or ()),
                current_endpoint=str(raw.get("current_endpoint") or ""),
                master=str(raw.get("master") or ""),
                backend=str(raw.get("backend") or ""),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"not a trainer world: {e!r}") from e
