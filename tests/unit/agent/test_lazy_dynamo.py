"""The ``torch._dynamo`` stand-in of a PyTorch trainer (`frameworks.torch.lazy_dynamo`).

Each case trains in a fresh process (the stand-in is process-wide, and this one may have loaded
dynamo already): the trainer's collective installs it, as `ElasticTrainer.start()` does, then
trains with SGD or Adam, and the figures are compared with a run whose ``EDL_TORCH_LAZY_DYNAMO=0``
loaded the real module first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support.frameworks import needs

pytestmark = [pytest.mark.slow, needs("torch")]  # each case trains in a torch subprocess

PRELUDE = """
import io, json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(message)s")
import torch
from agent.trainer import frameworks

collective = frameworks.get("torch").collective()  # what ElasticTrainer.start() builds
assert collective.self_test("gloo") is None  # init_process_group asks dynamo's trace_rules


def dynamo() -> str:
    return type(sys.modules["torch._dynamo"]).__name__


def step_of(model, opt, x, y):
    def step():
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def train(name, steps=6, compile_from=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    if name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step = step_of(model, opt, torch.randn(16, 6), torch.randn(16, 2))
    losses, eager_until = [], None
    for i in range(steps):
        if i == compile_from:
            eager_until = dynamo()
            step = torch.compile(step, backend="eager")
        losses.append(step().item())
        if i == 1:  # the state hand-off's round trip
            buf = io.BytesIO()
            torch.save(opt.state_dict(), buf)
            buf.seek(0)
            opt.load_state_dict(torch.load(buf))
    params = [p.detach().flatten().tolist() for p in model.parameters()]
    return {"losses": losses, "params": params, "before_compile": eager_until}
"""


def run(code: str, lazy: bool = True, first: str = "") -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if k != "EDL_TORCH_LAZY_DYNAMO"}
    if not lazy:
        env["EDL_TORCH_LAZY_DYNAMO"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", first + PRELUDE + code],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


EAGER = """
out = {name: train(name) for name in ("sgd", "adam")}
out["dynamo"] = dynamo()
out["submodules"] = sorted(m for m in sys.modules if m.startswith("torch._dynamo."))
print(json.dumps(out))
"""


def test_eager_training_never_loads_dynamo_and_matches_the_real_module() -> None:
    lazy, log = run(EAGER)
    assert (lazy.pop("dynamo"), lazy.pop("submodules")) == ("LazyDynamo", [])
    assert "torch._dynamo loaded late" not in log
    real, _ = run(EAGER, lazy=False)
    assert (real.pop("dynamo"), bool(real.pop("submodules"))) == ("module", True)
    assert lazy == real  # every loss and parameter, to the last bit


COMPILED = """
from torch.optim.optimizer import Optimizer

out = train("adam", compile_from=3)
from torch._dynamo.utils import counters
wrapped = [Optimizer.zero_grad, Optimizer.add_param_group, Optimizer.state_dict,
           Optimizer.load_state_dict]
caches = [(f.__wrapped__, getattr(f.__wrapped__, "__dynamo_disable")) for f in wrapped]
out["replayed"] = [c is not fn and c._torchdynamo_disable and c._torchdynamo_orig_callable is fn
                   for fn, c in caches]
out["frames"] = dict(counters["frames"])
out["dynamo"] = dynamo()
out["same_module"] = torch._dynamo is sys.modules["torch._dynamo"]
print(json.dumps(out))
"""


def test_compiling_after_eager_steps_loads_dynamo_and_replays_what_it_disabled() -> None:
    """torch.compile(backend="eager") on a whole step (zero_grad, backward, step) after three
    eager ones: the same numbers and the same frames compiled as with the real module from
    the start. Without the replay dynamo would trace into zero_grad & co (34 frames, not 11)."""
    lazy, log = run(COMPILED)
    assert lazy.pop("before_compile") == "LazyDynamo"
    assert "torch._dynamo loaded late" in log and "4 disabled function(s) replayed" in log
    real, _ = run(COMPILED, lazy=False)
    assert real.pop("before_compile") == "module"
    assert lazy["replayed"] == [True] * 4 and lazy["frames"]["ok"] > 0
    assert (lazy["dynamo"], lazy["same_module"]) == ("module", True)
    assert lazy == real


@pytest.mark.parametrize(
    "how",
    [
        "import torch._dynamo.config as config",
        "from torch._dynamo import config",
        "config = torch._dynamo.config",
    ],
)
def test_a_submodule_or_attribute_loads_the_real_module_once(how: str) -> None:
    code = f"""
stand_in = torch._dynamo
train("adam", steps=2)
{how}
real = sys.modules["torch._dynamo"]
print(json.dumps({{
    "dynamo": dynamo(),
    "on_torch": torch._dynamo is real,
    "config": config is real.config is sys.modules["torch._dynamo.config"],
    "config_loader": type(config.__spec__.loader).__name__,
    "stale_reference_forwards": stand_in.config is config and stand_in.real is real,
}}))
"""
    out, log = run(code)
    assert out == {
        "dynamo": "module",
        "on_torch": True,
        "config": True,
        "config_loader": "SourceFileLoader",  # the real import's, not run a second time
        "stale_reference_forwards": True,
    }
    assert log.count("torch._dynamo loaded late") == 1


def test_switched_off_the_real_module_loads_with_the_collective() -> None:
    code = """
print(json.dumps({"dynamo": dynamo()}))
"""
    assert run(code, lazy=False)[0] == {"dynamo": "module"}
    assert run(code)[0] == {"dynamo": "LazyDynamo"}


def test_a_script_that_loaded_dynamo_first_keeps_it() -> None:
    code = """
from agent.trainer.frameworks.torch.lazy_dynamo import install
print(json.dumps({"dynamo": dynamo(), "again": install(torch) is torch._dynamo}))
"""
    assert run(code)[0] == {"dynamo": "LazyDynamo", "again": True}
    out, _ = run(code, first="import torch._dynamo\n")
    assert out == {"dynamo": "module", "again": False}


def test_a_script_that_imported_elastic_data_parallel_loads_dynamo_while_warming_up() -> None:
    """Its DDP needs dynamo: loaded at start, so a joiner does not load it inside a pause."""
    out, _ = run(EAGER, first="from agent.trainer import ElasticDataParallel\n")
    assert out["dynamo"] == "module"
