"""Exactly-once data across rescales: every step takes the next global batch of the epoch.

The epoch's order is a permutation fixed by ``(seed, epoch)``, and the only position is one
global counter (samples of this epoch already trained). A step takes the next `global_batch`
samples (fewer at the end of the epoch) and splits them across the *current* world, so a
rescale between two steps changes who trains which sample but never which samples are trained:
nothing is lost or repeated, and with a sum-then-divide gradient the maths matches one process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class StepPlan:
    """What one step trains: this rank's sample ids and the global count to divide by."""

    epoch: int
    start: int
    """Position in the epoch's permutation where this step's global batch begins."""
    global_count: int
    """Samples in this step across all ranks (the gradient divisor)."""
    indices: npt.NDArray[np.int64]
    """This rank's sample ids (may be empty in the last step of an epoch when world > count)."""


class ElasticSampler:
    """Deterministic per-epoch permutation + one global position, partitioned per step."""

    def __init__(self, num_samples: int, global_batch: int, epochs: int, seed: int = 0) -> None:
        if num_samples <= 0 or global_batch <= 0 or epochs <= 0:
            raise ValueError("num_samples, global_batch and epochs must be positive")
        self.num_samples = num_samples
        self.global_batch = global_batch
        self.epochs = epochs
        self.seed = seed
        self.epoch = 0
        self.consumed = 0
        self._perm_epoch = -1
        self._perm: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)

    @property
    def done(self) -> bool:
        """True once every epoch has been consumed."""
        return self.epoch >= self.epochs

    def permutation(self, epoch: int) -> npt.NDArray[np.int64]:
        """The order of `epoch` (the same on every rank and in every incarnation)."""
        if epoch != self._perm_epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._perm = rng.permutation(self.num_samples).astype(np.int64)
            self._perm_epoch = epoch
        return self._perm

    def plan(self, rank: int, world_size: int) -> StepPlan | None:
        """The next step for `rank` of `world_size`, or None when training is over."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of {world_size}")
        if self.done:
            return None
        count = min(self.global_batch, self.num_samples - self.consumed)
        ids = self.permutation(self.epoch)[self.consumed : self.consumed + count]
        part = np.array_split(ids, world_size)[rank]
        return StepPlan(self.epoch, self.consumed, count, part)

    def advance(self, plan: StepPlan) -> None:
        """Commit a finished step (the same call on every rank keeps positions equal)."""
        if (plan.epoch, plan.start) != (self.epoch, self.consumed):
            raise ValueError(f"plan {plan.epoch}/{plan.start} is not the current position")
        self.consumed += plan.global_count
        if self.consumed >= self.num_samples:
            self.epoch, self.consumed = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """The position, for the state hand-off."""
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "num_samples": self.num_samples,
        }

    def set_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a hand-off; refuses a position taken on other data."""
        if int(state["num_samples"]) != self.num_samples or int(state["seed"]) != self.seed:
            raise ValueError(f"sampler state {state} is for other data or another seed")
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])
