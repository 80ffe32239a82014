"""`ElasticDataLoader`: this rank's share of each global batch, through the framework's DataLoader.

The user's own dataset (a ``torch.utils.data.Dataset`` or a ``paddle.io.Dataset``: anything
with ``__len__`` and ``__getitem__``) is read by the framework's real DataLoader, with its
workers, prefetching, pinned memory and collate function; only the batch sampler is ours.
It plans from the trainer's sampler (`agent.trainer.sampler`): the steps of the current epoch
from the committed position, each one this rank's part of the next global batch in the
current world, so the DataLoader may load ahead. A world change (or a new epoch) throws the
batches loaded ahead away and plans again from the committed position in the new world:
nothing it loaded for a world that ended is ever trained, and no sample is lost or repeated.
The position travels with the training state, so a restarted trainer resumes mid-epoch.

A rank whose share of a step is empty (the last global batch of an epoch, smaller than the
world) gets one sample of that batch, weighted 0 (`StepPlan.share`), so that it still joins
the step's gradient all-reduce; the sample ledger records nothing for it.

Importing this module imports no framework.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from agent.protocol.errors import ElasticError
from agent.trainer.sampler import ElasticSampler, StepPlan

if TYPE_CHECKING:
    from agent.trainer.elastic import ElasticTrainer

REFUSED_OPTIONS = ("sampler", "batch_sampler", "batch_size")
"""DataLoader keywords the elastic loader decides itself (it plans every batch)."""


class Sized(Protocol):
    """A map-style dataset: its length and its samples by index."""

    def __len__(self) -> int:
        """Samples in the dataset."""
        ...

    def __getitem__(self, index: int) -> Any:
        """Sample `index`."""
        ...


class PlannedBatches:
    """The batch sampler the framework's DataLoader reads: index lists of planned steps.

    `aim` says where the next pass starts (a position of an epoch, a rank of a world); each
    list it hands out is remembered, in order, until the trainer takes its batch (`take`).
    """

    def __init__(self, sampler: ElasticSampler) -> None:
        self._sampler = sampler
        self._start: tuple[int, int] = (0, 0)
        self._rank, self._world_size = 0, 1
        self.planned: deque[StepPlan] = deque()
        """Steps whose index lists went to the DataLoader and whose batch was not taken yet."""

    def aim(self, plan: StepPlan, rank: int, world_size: int) -> None:
        """The next pass plans from `plan` (this rank's, in this world) to its epoch's end."""
        self._start = (plan.epoch, plan.start)
        self._rank, self._world_size = rank, world_size
        self.planned.clear()

    def __iter__(self) -> Iterator[list[int]]:
        epoch, start = self._start
        sampler = self._sampler
        for plan in sampler.plans(epoch, start, self._rank, self._world_size):
            self.planned.append(plan)
            ids = plan.indices.tolist()
            yield ids if ids else [sampler.stand_in(plan)]

    def __len__(self) -> int:
        return self._sampler.steps_per_epoch

    def take(self, plan: StepPlan) -> None:
        """The batch of `plan` came out of the DataLoader: it must be the oldest planned."""
        if not self.planned:
            raise ElasticError(f"the DataLoader gave a batch nobody planned (step at {plan.start})")
        oldest = self.planned.popleft()
        if (oldest.epoch, oldest.start, oldest.global_count) != (
            plan.epoch,
            plan.start,
            plan.global_count,
        ) or oldest.indices.tolist() != plan.indices.tolist():
            raise ElasticError(
                f"the DataLoader is out of step: it loaded epoch {oldest.epoch} position "
                f"{oldest.start} for the step at epoch {plan.epoch} position {plan.start}"
            )


class ElasticDataLoader:
    """Iterates this rank's share of each global batch of the current epoch (see the module).

    `batch_size` is the **global** batch (all ranks together), fixed whatever the world; with
    ``drop_last=False`` (the default) an epoch's last global batch holds what is left, else it
    is left out. `shuffle` (default True) orders each epoch by a permutation of
    ``(seed, epoch)``; False keeps the dataset's order. Every other keyword is the
    framework DataLoader's own (``num_workers``, ``collate_fn``, ``pin_memory``,
    ``prefetch_factor``, ``persistent_workers``, ``worker_init_fn``, ...); with workers,
    PyTorch's default becomes ``persistent_workers=True`` (a re-plan after a world change then
    reuses them). One elastic loader per trainer: its position is part of the training state.
    """

    def __init__(
        self,
        dataset: Sized,
        batch_size: int,
        trainer: ElasticTrainer,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        **options: Any,
    ) -> None:
        refused = sorted(set(options) & set(REFUSED_OPTIONS))
        if refused:
            raise TypeError(
                f"ElasticDataLoader plans every batch itself: {', '.join(refused)} cannot be given"
            )
        self.dataset = dataset
        self.sampler = ElasticSampler(len(dataset), batch_size, None, seed, shuffle, drop_last)
        """The position in the data (part of the training state)."""
        self._trainer = trainer
        self._batches = PlannedBatches(self.sampler)
        self._loader: Iterable[Any] = trainer.collective.data_loader(
            dataset, self._batches, options
        )
        self._data: Iterator[Any] | None = None
        self._aimed_at: tuple[int, int] | None = None  # (generation, epoch) of `_data`
        trainer.attach_sampler(self.sampler)

    @property
    def batch_size(self) -> int:
        """The global batch."""
        return self.sampler.global_batch

    def __len__(self) -> int:
        """Steps in an epoch (each rank gets one batch per step)."""
        return self.sampler.steps_per_epoch

    def __iter__(self) -> Iterator[Any]:
        """The steps of an epoch, restoring the training state first (once).

        The current epoch, or the one `sampler.set_epoch` names (none of an epoch trained
        before a restart).
        """
        trainer = self._trainer
        trainer.ensure_restored()
        sampler = self.sampler
        epoch = sampler.epoch if sampler.next_pass is None else sampler.next_pass
        sampler.next_pass = None
        try:
            for plan in trainer.loop.steps(epoch=epoch):
                yield self._fetch(plan)
        finally:
            self._data = self._aimed_at = None  # what was loaded ahead is never trained

    def _fetch(self, plan: StepPlan) -> Any:
        trainer = self._trainer
        aim = (trainer.generation, plan.epoch)
        if self._data is None or self._aimed_at != aim:
            self._data = None  # drop the iterator of the ended world before the next one
            self._batches.aim(plan, trainer.rank, trainer.world_size)
            self._data = iter(self._loader)
            self._aimed_at = aim
        batch = next(self._data)
        self._batches.take(plan)
        return batch
