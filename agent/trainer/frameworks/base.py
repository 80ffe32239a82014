"""The seam between the framework-neutral trainer library and one training framework.

A framework is two objects, so that the agent process never imports one:

- a `Framework` descriptor, cheap to import: its name, the module whose import marks a script
  as using it, its environment variables and how a neutral `TrainerWorld` maps to them at
  launch and back. The agent uses only this (to start a trainer in a world).
- a `Collective` (imports the framework; trainer process only): forms the collective of a
  world, all-reduces a few integers, broadcasts bytes, averages gradients (timed), turns
  model and optimizer state into numpy and back, and builds the framework's own DataLoader
  and data-parallel model for `ElasticDataLoader` and `ElasticDataParallel`. `ElasticTrainer`
  speaks only this.

A new framework is one folder beside ``paddle/`` and ``torch/`` with both objects, plus one
line in `agent.trainer.frameworks.FRAMEWORKS` (helpers both collectives share are in
`agent.trainer.frameworks.arrays`); `tests/unit/agent/test_frameworks.py` runs the
same conformance checks on every registered one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agent.errors import ConfigError
from agent.protocol import env as names
from agent.protocol.trainer_world import TrainerWorld

if TYPE_CHECKING:
    from agent.trainer.recording import StepRecorder

Reducer = Callable[[], float]
"""A gradient all-reduce: averages the gradients in place and returns the seconds spent in comm."""


class ReduceOp(enum.Enum):
    """The reductions the elastic protocol needs (stop flags, steps, ranks)."""

    MAX = "max"
    MIN = "min"


class WorldListener(Protocol):
    """Something that holds a world's group (a data-parallel model) and hears of its changes."""

    def world_ending(self) -> None:
        """The trainer leaves its world for a new one: drop what holds the old group."""

    def world_ready(self) -> None:
        """The new world is formed and its state agreed: build on its group."""

    def communication_failed(self) -> bool:
        """A collective of this listener failed (a peer died or left mid-step)."""


class DataParallelHost(Protocol):
    """What a framework's data-parallel model needs of the elastic trainer (`ElasticTrainer`)."""

    @property
    def world_size(self) -> int:
        """Ranks in the current world."""

    @property
    def share(self) -> float:
        """This rank's part of the current step's global batch: its gradient's weight."""

    @property
    def recorder(self) -> StepRecorder:
        """Where communication is recorded."""

    def add_listener(self, listener: WorldListener) -> None:
        """`listener` hears of every world change."""

    def on_step_end(self, hook: Callable[[], None]) -> None:
        """`hook` runs at the end of every step, on the training thread."""

    def peer_lost(self, why: str) -> Any:
        """A collective of the current step failed: saves the committed state and exits."""


class Collective(Protocol):
    """One trainer's collective, in whatever framework the script trains with.

    Every method that communicates raises the framework's own error when a peer is gone;
    the caller (`ElasticTrainer`) turns any of them into `PeerLost`.
    """

    def self_test(self, backend: str) -> str | None:
        """None when this process can re-form its collective in-process; else why not."""

    def init(self, world: TrainerWorld, in_process: bool, timeout_seconds: float) -> None:
        """Forms the collective of `world` (a world of one: none), leaving any previous one.

        `in_process` says the self-test passed and the process may live through rescales.
        """

    def all_reduce_ints(self, values: Sequence[int], op: ReduceOp) -> list[int]:
        """Element-wise `op` of `values` over every rank (the same length everywhere)."""

    def broadcast_bytes(self, blob: bytes, src: int) -> bytes:
        """Rank `src`'s `blob` on every rank (the others pass b"")."""

    def gradient_all_reduce(self, model: Any, recorder: StepRecorder, world_size: int) -> Reducer:
        """The timed, bucketed gradient average for `model` in this world."""

    def save_state(self, model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Model and optimizer state as picklable numpy values."""

    def load_state(
        self,
        model: Any,
        optimizer: Any,
        model_state: dict[str, Any],
        optimizer_state: dict[str, Any],
    ) -> None:
        """Inverse of `save_state` (an empty optimizer state leaves the optimizer as it is)."""

    def data_loader(
        self, dataset: Any, batches: Iterable[list[int]], options: Mapping[str, Any]
    ) -> Iterable[Any]:
        """The framework's DataLoader over `dataset`, reading its index lists from `batches`.

        `options` are the DataLoader's own keywords (e.g. ``num_workers``).
        """

    def data_parallel(self, module: Any, host: DataParallelHost, options: Mapping[str, Any]) -> Any:
        """`module` as the framework's data-parallel model in every world of `host`."""


class Framework(Protocol):
    """A training framework as the agent sees it: names and environment, no import."""

    @property
    def name(self) -> str:
        """Registry name (`--framework`, ``EDL_FRAMEWORK``)."""

    @property
    def module(self) -> str:
        """Top-level module a script using this framework imports (detection)."""

    @property
    def env_names(self) -> tuple[str, ...]:
        """This framework's world variables; any of them set means "launched for it"."""

    def launch_env(self, world: TrainerWorld) -> dict[str, str]:
        """The environment a trainer of `world` starts with (neutral names included)."""

    def world_from_env(self, env: Mapping[str, str]) -> TrainerWorld:
        """The world a trainer reads back (absent variables: one rank); raises `ConfigError`."""

    def collective(self) -> Collective:
        """This framework's `Collective` (imports the framework)."""


def int_from_env(env: Mapping[str, str], name: str, default: int) -> int:
    """An integer variable; absent or empty means `default`; raises `ConfigError`."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise ConfigError(f"{name}={raw!r} is not an integer") from e


def neutral_env(world: TrainerWorld) -> dict[str, str]:
    """The variables every framework's launch environment carries besides its own."""
    return {names.GENERATION: str(world.generation)}


def generation_from_env(env: Mapping[str, str]) -> int:
    """The world's generation (`EDL_GENERATION`, 0 when absent)."""
    return int_from_env(env, names.GENERATION, 0)
