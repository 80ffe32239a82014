"""PyTorch's side of the seam without peers: gradient buckets, the one-rank no-op, the state
round trip and the in-process self-test on the installed torch.

Several ranks re-forming their group across generations: tests/integration/
test_elastic_torch_collective.py; whole elastic jobs: test_elastic_digits.py.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from agent.trainer.recording import StepRecorder

pytestmark = pytest.mark.slow  # imports torch (inside the tests: collecting them does not)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.fixture
def reducer_class(torch: Any) -> Any:
    from agent.trainer.frameworks.torch.gradients import GradientAllReduce

    return GradientAllReduce


@pytest.fixture
def collective(torch: Any) -> Any:
    from agent.trainer.frameworks.torch.collective import TorchCollective

    return TorchCollective()


def grads_of(torch: Any, model: Any) -> list[Any]:
    model(torch.ones(2, 8)).sum().backward()
    return [p.grad for p in model.parameters()]


def test_one_rank_communicates_nothing(torch: Any, reducer_class: Any) -> None:
    model = torch.nn.Linear(8, 4)
    rec = StepRecorder()
    before = [g.clone() for g in grads_of(torch, model)]
    assert reducer_class(model.parameters(), rec, world_size=1)() == 0.0
    assert (rec.comm_calls, rec.comm_bytes) == (0, 0)
    assert all(torch.equal(p.grad, b) for p, b in zip(model.parameters(), before, strict=True))


def test_buckets_respect_the_size_limit_and_keep_every_gradient(
    torch: Any, reducer_class: Any
) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    grads = grads_of(torch, model)  # fp32: 512, 64, 256, 16 bytes
    reducer = reducer_class(model.parameters(), StepRecorder(), 2, bucket_bytes=600)
    buckets = reducer._buckets(grads)
    assert [len(b) for b in buckets] == [2, 2]  # 512+64 | 256+16
    assert [g for b in buckets for g in b] == grads
    frozen = torch.nn.Linear(8, 4)
    frozen.bias.requires_grad_(False)
    assert len(reducer_class(frozen.parameters(), StepRecorder(), 2)._params) == 1


def test_model_and_adam_state_survive_numpy_and_pickle(torch: Any, collective: Any) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        model(torch.randn(5, 8)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    coll = collective
    model_state, opt_state = pickle.loads(pickle.dumps(coll.save_state(model, opt)))

    torch.manual_seed(1)
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    twin_opt = torch.optim.Adam(twin.parameters(), lr=0.01)
    coll.load_state(twin, twin_opt, model_state, opt_state)
    x = torch.randn(5, 8)
    for m, o in ((model, opt), (twin, twin_opt)):  # the next step is the same step
        m(x).pow(2).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_installed_torch_passes_the_in_process_self_test(torch: Any, collective: Any) -> None:
    coll = collective
    assert coll.self_test("gloo") is None
    assert not torch.distributed.is_initialized()  # the test leaves nothing behind
    assert "only gloo" in (coll.self_test("nccl") or "")
