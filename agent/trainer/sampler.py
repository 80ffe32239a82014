"""Exactly-once data across rescales: every step takes the next global batch of the epoch.

The epoch's order is a permutation fixed by ``(seed, epoch)`` (or the dataset's own order,
``shuffle=False``), and the only position is one global counter (samples of this epoch already
trained). A step takes the next `global_batch` samples (fewer at the end of the epoch, or none:
``drop_last`` leaves a short last batch out) and splits them across the *current* world, so a
rescale between two steps changes who trains which sample but never which samples are
trained: nothing is lost or repeated, and with the gradient weighted by each rank's share the
maths matches one process.
"""

from __future__ import annotations

from collections.abc import Iterator
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

    @property
    def share(self) -> float:
        """This rank's part of the step's samples (0 for an empty share)."""
        return len(self.indices) / self.global_count


class ElasticSampler:
    """Deterministic per-epoch permutation + one global position, partitioned per step."""

    def __init__(
        self,
        num_samples: int,
        global_batch: int,
        epochs: int | None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        """`epochs` None: no end yet (`ElasticTrainer.epochs` sets it)."""
        if num_samples <= 0 or global_batch <= 0 or (epochs is not None and epochs <= 0):
            raise ValueError("num_samples, global_batch and epochs must be positive")
        if drop_last and global_batch > num_samples:
            raise ValueError(
                f"drop_last with a global batch of {global_batch} leaves none of the "
                f"{num_samples} samples"
            )
        self.num_samples = num_samples
        self.global_batch = global_batch
        self.epochs = epochs
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self.consumed = 0
        self.next_pass: int | None = None
        """The epoch the next pass of a loader trains (`set_epoch`); None: the current one."""
        self._perm_epoch = -1
        self._perm: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)

    @property
    def done(self) -> bool:
        """True once every epoch has been consumed (never while the epochs are open)."""
        return self.epochs is not None and self.epoch >= self.epochs

    @property
    def epoch_samples(self) -> int:
        """Samples an epoch trains (all of them, or whole global batches with ``drop_last``)."""
        if self.drop_last:
            return self.num_samples - self.num_samples % self.global_batch
        return self.num_samples

    @property
    def progress(self) -> float | None:
        """The share of every planned epoch's samples trained, 0-1 (None: no end planned).

        ``edl_job_progress_ratio``: samples trained over the planned total.
        """
        if self.epochs is None or self.epoch_samples <= 0:
            return None
        done = self.epoch * self.epoch_samples + self.consumed
        return min(1.0, done / (self.epochs * self.epoch_samples))

    @property
    def steps_per_epoch(self) -> int:
        """Global batches in one epoch."""
        return -(-self.epoch_samples // self.global_batch)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the loop is in, as ``DistributedSampler.set_epoch`` is told it.

        The position decides what is trained: an epoch the job trained before a restart makes
        the next pass of the loader empty; the current one continues where it stopped. A
        later one is refused (epochs are trained in order, none skipped).
        """
        if epoch > self.epoch:
            raise ValueError(
                f"set_epoch({epoch}): epoch {self.epoch} is not trained to its end yet"
            )
        self.next_pass = epoch

    def permutation(self, epoch: int) -> npt.NDArray[np.int64]:
        """The order of `epoch` (the same on every rank and in every incarnation)."""
        if epoch != self._perm_epoch:
            if self.shuffle:
                rng = np.random.default_rng([self.seed, epoch])
                self._perm = rng.permutation(self.num_samples).astype(np.int64)
            else:
                self._perm = np.arange(self.num_samples, dtype=np.int64)
            self._perm_epoch = epoch
        return self._perm

    def plan(self, rank: int, world_size: int) -> StepPlan | None:
        """The next step for `rank` of `world_size`, or None when training is over."""
        if self.done:
            return None
        return self._plan_at(self.epoch, self.consumed, rank, world_size)

    def plans(self, epoch: int, start: int, rank: int, world_size: int) -> Iterator[StepPlan]:
        """The steps of `epoch` from position `start` to its end, as `plan` will give them.

        While the world stays the same, that is (the sampler itself does not move).
        """
        while start < self.epoch_samples:
            step = self._plan_at(epoch, start, rank, world_size)
            yield step
            start += step.global_count

    def _plan_at(self, epoch: int, start: int, rank: int, world_size: int) -> StepPlan:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of {world_size}")
        count = min(self.global_batch, self.epoch_samples - start)
        ids = self.permutation(epoch)[start : start + count]
        part = np.array_split(ids, world_size)[rank]
        return StepPlan(epoch, start, count, part)

    def stand_in(self, plan: StepPlan) -> int:
        """A sample of `plan`'s global batch, for a rank whose share of it is empty.

        It computes on it (weighted 0) so that it still joins the step's gradient all-reduce.
        """
        return int(self.permutation(plan.epoch)[plan.start])

    def advance(self, plan: StepPlan) -> None:
        """Commit a finished step (the same call on every rank keeps positions equal)."""
        if (plan.epoch, plan.start) != (self.epoch, self.consumed):
            raise ValueError(f"plan {plan.epoch}/{plan.start} is not the current position")
        self.consumed += plan.global_count
        if self.consumed >= self.epoch_samples:
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
