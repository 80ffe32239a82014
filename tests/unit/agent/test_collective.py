"""GradientAllReduce without a collective: bucketing, and the one-rank no-op.

The real 2-rank all-reduce over gloo is exercised by tests/integration/agent/test_agent_exporter.py,
which checks the exact comm bytes per step.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.trainer.recording import StepRecorder

pytestmark = pytest.mark.slow  # imports Paddle (inside the tests: collecting them does not)


@pytest.fixture
def paddle() -> Any:
    return pytest.importorskip("paddle")


@pytest.fixture
def reducer_class(paddle: Any) -> Any:
    from agent.trainer.frameworks.paddle.gradients import GradientAllReduce

    return GradientAllReduce


def grads_of(paddle: Any, model: Any) -> list[Any]:
    x = paddle.ones([2, 8])
    model(x).sum().backward()
    return [p.grad for p in model.parameters()]


def test_one_rank_communicates_nothing(paddle: Any, reducer_class: Any) -> None:
    model = paddle.nn.Linear(8, 4)
    rec = StepRecorder()
    before = [g.numpy().copy() for g in grads_of(paddle, model)]
    assert reducer_class(model.parameters(), rec, world_size=1)() == 0.0
    assert (rec.comm_calls, rec.comm_bytes) == (0, 0)
    after = [p.grad.numpy() for p in model.parameters()]
    assert all((a == b).all() for a, b in zip(after, before, strict=True))


def test_buckets_respect_the_size_limit_and_keep_every_gradient(
    paddle: Any, reducer_class: Any
) -> None:
    model = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.Linear(16, 4))
    grads = grads_of(paddle, model)
    sizes = [int(g.size) * 4 for g in grads]  # fp32: 512, 64, 256, 16 bytes
    reducer = reducer_class(model.parameters(), StepRecorder(), 2, bucket_bytes=600)
    buckets = reducer._buckets(grads)
    assert [len(b) for b in buckets] == [2, 2]  # 512+64 | 256+16
    assert sum(int(g.size) * 4 for b in buckets for g in b) == sum(sizes)
    for bucket in buckets:
        assert sum(int(g.size) * 4 for g in bucket) <= 600 or len(bucket) == 1
