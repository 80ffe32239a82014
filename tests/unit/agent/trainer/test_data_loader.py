"""`ElasticDataLoader`: this rank's share of each global batch, loaded ahead, exactly once.

One process plays one rank of a world (the plans of the other ranks are the sampler's, tested
in test_sampler.py); a world change is what the trainer's rescale does to the loop: the next
step is planned in the new world. The framework's DataLoader is a fake that loads ahead like
workers do, then PyTorch's real one with two worker processes (slow).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from agent.trainer.data import ElasticDataLoader
from agent.trainer.handoff import StateHandoff
from agent.trainer.ledger import SampleLedger
from agent.trainer.recording import StepRecorder
from agent.trainer.sampler import ElasticSampler
from agent.trainer.settings import ElasticTrainerSettings
from agent.trainer.step_loop import StepLoop
from tests.unit.agent.trainer.helpers import DictCollective, Ranks
from tests.unit.agent.trainer.test_handoff import Link


class Squares:
    """A map-style dataset: sample i is i*i (so a batch shows which ids it holds)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index * index


class AheadLoader:
    """A DataLoader that keeps `ahead` batches loaded, as workers with prefetching do."""

    def __init__(self, dataset: Squares, batches: Iterable[list[int]], ahead: int) -> None:
        self.dataset, self.batches, self.ahead = dataset, batches, ahead
        self.loaded: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        source = iter(self.batches)
        queue: list[list[int]] = []
        for ids in source:
            self.loaded.append(ids)
            queue.append([self.dataset[i] for i in ids])
            if len(queue) > self.ahead:
                yield queue.pop(0)
        yield from queue


class Framework(DictCollective):
    """`DictCollective` with a DataLoader: `AheadLoader`, or `make`'s."""

    def __init__(self, make: Callable[..., Any] | None = None, ahead: int = 3) -> None:
        super().__init__()
        self.make, self.ahead = make, ahead
        self.loaders: list[Any] = []

    def data_loader(
        self, dataset: Any, batches: Iterable[list[int]], options: Mapping[str, Any]
    ) -> Iterable[Any]:
        loader = (
            self.make(dataset, batches, options)
            if self.make
            else AheadLoader(dataset, batches, self.ahead)
        )
        self.loaders.append(loader)
        return loader


class Trainer:
    """What the loader uses of `ElasticTrainer`: a world, its loop, state, a collective."""

    def __init__(self, world: Ranks, collective: Framework, state_dir: Path | None = None):
        self.world = world
        self.collective = collective
        fake: Any = collective
        self.handoff = StateHandoff(Link(), fake, ElasticTrainerSettings(state_dir=state_dir))
        self.handoff.attach({"w": 0}, None)
        self.moves: list[Ranks] = []
        self.loop = StepLoop(world, self.handoff, StepRecorder(), self._rescale)

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def generation(self) -> int:
        return self.world.generation

    def attach_sampler(self, sampler: ElasticSampler) -> None:
        self.handoff.attach_sampler(sampler)

    def ensure_restored(self) -> None:
        if not self.handoff.restored:
            self.handoff.restore()

    def _rescale(self) -> None:
        """An in-process rescale: the next world (`moves`), no drain pending there."""
        nxt = self.moves.pop(0)
        self.world.rank, self.world.world_size = nxt.rank, nxt.world_size
        self.world.generation, self.world.drain = nxt.generation, False


def loader_of(
    world: Ranks, samples: int = 20, batch: int = 8, **kwargs: Any
) -> tuple[ElasticDataLoader, Trainer, Framework]:
    framework = kwargs.pop("framework", None) or Framework()
    trainer = Trainer(world, framework, kwargs.pop("state_dir", None))
    loader = ElasticDataLoader(Squares(samples), batch, trainer, seed=5, **kwargs)  # type: ignore[arg-type]
    return loader, trainer, framework


def ids_of(batch: list[int]) -> list[int]:
    return [round(v**0.5) for v in batch]


def test_a_rank_gets_its_share_of_each_global_batch_in_order() -> None:
    loader, trainer, _ = loader_of(Ranks(1, 3))
    sampler = ElasticSampler(20, 8, None, seed=5)
    expected = [p.indices.tolist() for p in sampler.plans(0, 0, 1, 3)]
    assert [ids_of(b) for b in loader] == expected  # shares of 8, 8, 4: 3, 3, 1 ids
    assert [len(ids) for ids in expected] == [3, 3, 1]
    assert trainer.handoff.global_step == 3 and loader.sampler.epoch == 1
    assert len(loader) == 3


def test_batches_loaded_for_a_world_that_ended_are_never_trained() -> None:
    """Rank 0 of 2 loads 3 steps ahead; after step 0 the world becomes rank 1 of 3."""
    loader, trainer, framework = loader_of(Ranks(0, 2), samples=40, batch=6)
    trainer.moves.append(Ranks(1, 3, generation=2))
    trained = []
    for i, batch in enumerate(loader):
        trained.append(ids_of(batch))
        if i == 0:
            trainer.world.drain = True  # a stop, agreed at this step's end
    sampler = ElasticSampler(40, 6, None, seed=5)
    first = next(iter(sampler.plans(0, 0, 0, 2)))
    rest = [p.indices.tolist() for p in sampler.plans(0, 6, 1, 3)]
    assert trained == [first.indices.tolist(), *rest]
    (fake,) = framework.loaders
    discarded = [ids for ids in fake.loaded if ids not in trained]
    assert len(discarded) >= 2  # what was loaded ahead for the world of 2
    assert trainer.handoff.global_step == len(trained)


def test_an_empty_share_is_one_sample_weighted_zero_and_logged_as_nothing(tmp_path: Path) -> None:
    """10 samples in global batches of 4: the last step has 2, rank 2 of 3 gets none."""
    loader, trainer, _ = loader_of(Ranks(2, 3), samples=10, batch=4)
    trainer.loop.enter_world(SampleLedger(tmp_path, "m", 1, 2))
    shares, sizes = [], []
    for batch in loader:
        shares.append(trainer.loop.share)
        sizes.append(len(batch))
    assert sizes == [1, 1, 1]  # 1 of 4, 1 of 4, then the stand-in
    assert shares == [0.25, 0.25, 0.0]
    logged = (tmp_path / next(p.name for p in tmp_path.glob("*.jsonl"))).read_text()
    assert '"ids": []' in logged


def test_drop_last_leaves_the_short_last_batch_out() -> None:
    loader, _, _ = loader_of(Ranks(0, 1), samples=10, batch=4, drop_last=True)
    batches = [ids_of(b) for b in loader]
    assert [len(b) for b in batches] == [4, 4] and len(loader) == 2
    assert len({i for b in batches for i in b}) == 8


def test_a_restarted_trainer_resumes_mid_epoch_from_the_saved_position(tmp_path: Path) -> None:
    loader, trainer, _ = loader_of(Ranks(0, 1), state_dir=tmp_path)
    seen = []
    for batch in loader:
        seen.append(ids_of(batch))
        if len(seen) == 2:
            break  # the process "dies" here: step 2 never committed
    trainer.handoff.save()  # the local copy: 1 step committed (the second was not)
    again, restarted, _ = loader_of(Ranks(0, 1), state_dir=tmp_path)
    rest = [ids_of(b) for b in again]
    assert restarted.handoff.global_step == 3
    assert rest[0] == seen[1]  # the uncommitted step is trained again
    assert sorted(seen[0] + [i for b in rest for i in b]) == list(range(20))


def test_the_loader_refuses_what_it_decides_itself() -> None:
    with pytest.raises(TypeError, match="sampler cannot be given"):
        loader_of(Ranks(0, 1), sampler=[0, 1])


class Indices:
    """A map-style dataset whose sample i is ``[i]`` (an array: both DataLoaders collate it)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> npt.NDArray[np.int64]:
        return np.array([index], dtype=np.int64)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch", "paddle"])
def test_workers_load_ahead_and_a_world_change_discards_what_they_loaded(name: str) -> None:
    """The framework's own DataLoader with two worker processes: the same guarantees."""
    pytest.importorskip(name)
    make = import_module(f"agent.trainer.frameworks.{name}.data").data_loader
    framework = Framework(make=make)
    trainer = Trainer(Ranks(0, 2), framework)
    trainer.moves.append(Ranks(2, 3, generation=2))
    loader = ElasticDataLoader(Indices(), 8, trainer, seed=5, num_workers=2)  # type: ignore[arg-type]
    (real,) = framework.loaders
    assert real.num_workers == 2
    persistent = getattr(real, "persistent_workers", getattr(real, "_persistent_workers", None))
    assert persistent == (name == "torch")  # Paddle's default stands
    trained = []
    for i, batch in enumerate(loader):
        trained.append(np.asarray(batch).reshape(-1).tolist())
        if i == 1:
            trainer.world.drain = True
    sampler = ElasticSampler(64, 8, None, seed=5)
    plans = list(sampler.plans(0, 0, 0, 2))[:2] + list(sampler.plans(0, 16, 2, 3))
    assert trained == [p.indices.tolist() for p in plans]
    assert np.all([len(t) > 0 for t in trained])
    again = [np.asarray(b).reshape(-1).tolist() for b in loader]  # the next epoch
    assert again == [p.indices.tolist() for p in sampler.plans(1, 0, 2, 3)]


def test_a_loop_over_every_epoch_after_a_restart_skips_the_ones_trained(tmp_path: Path) -> None:
    """`for epoch in range(n): loader.sampler.set_epoch(epoch)`, resumed in epoch 1."""
    loader, trainer, _ = loader_of(Ranks(0, 1), state_dir=tmp_path)
    assert len(list(loader)) == 3  # epoch 0
    trainer.handoff.save()
    again, _, _ = loader_of(Ranks(0, 1), state_dir=tmp_path)
    passes = []
    for epoch in range(3):
        again.sampler.set_epoch(epoch)
        passes.append(len(list(again)))
    assert passes == [0, 3, 3]
