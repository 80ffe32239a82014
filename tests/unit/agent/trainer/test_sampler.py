from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.trainer.sampler import ElasticSampler


def run(sampler: ElasticSampler, sizes: list[int]) -> dict[int, Counter[int]]:
    """Train with world size sizes[i % len] at step i; return per-epoch sample counts."""
    seen: dict[int, Counter[int]] = {}
    step = 0
    while not sampler.done:
        world = sizes[step % len(sizes)]
        plans = [sampler.plan(r, world) for r in range(world)]
        assert all(p is not None for p in plans)
        for plan in plans:
            assert plan is not None
            seen.setdefault(plan.epoch, Counter()).update(int(i) for i in plan.indices)
        first = plans[0]
        assert first is not None
        assert sum(len(p.indices) for p in plans if p) == first.global_count
        sampler.advance(first)
        step += 1
        assert step < 10_000
    return seen


@settings(max_examples=150)
@given(
    n=st.integers(1, 200),
    batch=st.integers(1, 40),
    epochs=st.integers(1, 3),
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    seed=st.integers(0, 2**31),
)
def test_any_sequence_of_world_sizes_trains_each_sample_once_per_epoch(
    n: int, batch: int, epochs: int, sizes: list[int], seed: int
) -> None:
    seen = run(ElasticSampler(n, batch, epochs, seed), sizes)
    assert sorted(seen) == list(range(epochs))
    for counts in seen.values():
        assert counts == Counter(range(n))


@settings(max_examples=50)
@given(cut=st.integers(0, 30), sizes=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_state_hand_off_resumes_exactly_where_it_stopped(cut: int, sizes: list[int]) -> None:
    first = ElasticSampler(97, 8, 2, seed=3)
    seen: Counter[int] = Counter()
    for _ in range(cut):
        plan = first.plan(0, 1)
        if plan is None:
            break
        seen.update((plan.epoch * 1000 + int(i)) for i in plan.indices)
        first.advance(plan)
    second = ElasticSampler(97, 8, 2, seed=3)
    second.set_state_dict(first.state_dict())
    for epoch, counts in run(second, sizes).items():
        seen.update({epoch * 1000 + k: v for k, v in counts.items()})
    assert seen == Counter(e * 1000 + i for e in range(2) for i in range(97))


def test_permutation_is_deterministic_and_differs_by_epoch() -> None:
    a, b = ElasticSampler(50, 5, 2, seed=7), ElasticSampler(50, 5, 2, seed=7)
    assert np.array_equal(a.permutation(1), b.permutation(1))
    assert not np.array_equal(a.permutation(0), a.permutation(1))


def test_refuses_foreign_state_and_stale_plans() -> None:
    s = ElasticSampler(10, 4, 1, seed=1)
    with pytest.raises(ValueError):
        s.set_state_dict({"epoch": 0, "consumed": 0, "seed": 2, "num_samples": 10})
    plan = s.plan(0, 2)
    assert plan is not None
    s.advance(plan)
    with pytest.raises(ValueError):
        s.advance(plan)
    with pytest.raises(ValueError):
        s.plan(2, 2)


def test_last_step_may_leave_a_rank_empty() -> None:
    s = ElasticSampler(5, 4, 1)
    first = s.plan(0, 3)
    assert first is not None
    s.advance(first)
    plans = [s.plan(r, 3) for r in range(3)]
    assert [len(p.indices) for p in plans if p] == [1, 0, 0]


@settings(max_examples=60)
@given(
    n=st.integers(1, 120),
    batch=st.integers(1, 30),
    world=st.integers(1, 6),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_the_plans_ahead_are_the_steps_the_world_then_takes(
    n: int, batch: int, world: int, drop_last: bool, shuffle: bool
) -> None:
    """What a DataLoader loads ahead (`plans`) is what `plan` gives step by step, per rank."""
    if drop_last and batch > n:
        with pytest.raises(ValueError, match="leaves none"):
            ElasticSampler(n, batch, 1, drop_last=drop_last)
        return
    s = ElasticSampler(n, batch, 1, seed=2, shuffle=shuffle, drop_last=drop_last)
    ahead = {r: list(s.plans(0, 0, r, world)) for r in range(world)}
    assert len(ahead[0]) == s.steps_per_epoch
    trained: Counter[int] = Counter()
    for step in range(s.steps_per_epoch):
        plans = [s.plan(r, world) for r in range(world)]
        for r, plan in enumerate(plans):
            assert plan is not None
            assert plan.indices.tolist() == ahead[r][step].indices.tolist()
            trained.update(int(i) for i in plan.indices)
        assert sum(p.share for p in plans if p) == pytest.approx(1.0)
        s.advance(plans[0])  # type: ignore[arg-type]
    assert s.done
    assert sum(trained.values()) == s.epoch_samples and max(trained.values()) == 1
    if drop_last:
        assert s.epoch_samples == n - n % batch
    if not shuffle:
        assert sorted(trained) == list(range(s.epoch_samples))


def test_an_open_sampler_never_ends_until_told_its_epochs() -> None:
    s = ElasticSampler(4, 4, None)
    for _ in range(5):
        plan = s.plan(0, 1)
        assert plan is not None
        s.advance(plan)
    assert not s.done and s.epoch == 5
    s.epochs = 5
    assert s.done and s.plan(0, 1) is None


def test_the_stand_in_of_an_empty_share_is_a_sample_of_its_global_batch() -> None:
    s = ElasticSampler(5, 4, 1, seed=9)
    s.advance(s.plan(0, 3))  # type: ignore[arg-type]
    empty = s.plan(2, 3)
    assert empty is not None and len(empty.indices) == 0 and empty.share == 0.0
    batch = [int(i) for r in range(3) for i in s.plan(r, 3).indices]  # type: ignore[union-attr]
    assert s.stand_in(empty) in batch


def test_set_epoch_names_the_epoch_a_loop_is_in_and_refuses_a_skip() -> None:
    s = ElasticSampler(4, 4, None)
    s.advance(s.plan(0, 1))  # type: ignore[arg-type]  # epoch 0 is trained
    s.set_epoch(0)  # a loop over range(epochs) after a restart: epoch 0 again
    assert s.next_pass == 0
    s.set_epoch(1)
    with pytest.raises(ValueError, match="epoch 1 is not trained to its end"):
        s.set_epoch(2)
