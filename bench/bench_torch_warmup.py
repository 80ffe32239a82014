"""A PyTorch joiner's trainer, timed from its process start: ready, then its first step.

*Ready* is what a warm trainer does before it reports ready (`ElasticTrainer.start()`):
``import torch``, the collective built (with the ``torch._dynamo`` stand-in unless
``EDL_TORCH_LAZY_DYNAMO=0``) and its in-process self-test; *first step* adds the digits MLP,
Adam and one step. Each run is a fresh process; the setups alternate, and the medians are
printed with the load average at the start and the end. ::

    python bench/bench_torch_warmup.py --runs 7                 # stand-in on / off, this tree
    python bench/bench_torch_warmup.py --runs 7 --before DIR    # DIR: another tree (a `git
                                                                # archive` of an earlier commit)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(root: str, started: float) -> None:
    """The timed trainer (run in a fresh process, with `root` first on the path)."""
    sys.path.insert(0, root)
    import torch
    import torch.nn.functional as F

    from agent.trainer import frameworks

    torch.set_num_threads(1)
    collective = frameworks.get("torch").collective()
    assert collective.self_test("gloo") is None
    ready = time.time()
    from examples.train_digits_torch import build_model

    torch.manual_seed(0)
    model = build_model(64)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    F.cross_entropy(model(torch.randn(64, 64)), torch.randint(0, 10, (64,))).backward()
    optimizer.step()
    optimizer.zero_grad()
    stepped = time.time()
    dynamo = type(sys.modules.get("torch._dynamo")).__name__
    figures = {"ready": ready - started, "first_step": stepped - started, "dynamo": dynamo}
    print(json.dumps(figures))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", type=Path, help="a tree to compare this one with")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], float(args.child[1]))
        return 0
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EDL_TORCH_LAZY_DYNAMO")}
    if args.before:
        setups = {"before": (args.before.resolve(), base), "after": (ROOT, base)}
    else:
        off = {**base, "EDL_TORCH_LAZY_DYNAMO": "0"}
        setups = {"stand-in off": (ROOT, off), "stand-in on": (ROOT, base)}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    results: dict[str, list[dict[str, float | str]]] = {name: [] for name in setups}
    for i in range(args.runs):
        order = list(setups) if i % 2 == 0 else list(reversed(setups))
        for name in order:
            root, env = setups[name]
            started = time.time()
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(root), repr(started)],
                capture_output=True, text=True, env={**env, "PYTHONPATH": str(root)},
                cwd="/", check=True,
            )  # fmt: skip
            figures = json.loads(done.stdout.splitlines()[-1])
            results[name].append(figures)
            print(f"{i} {name:>13}: ready {figures['ready']:.2f} s, first step "
                  f"{figures['first_step']:.2f} s (torch._dynamo: {figures['dynamo']})",
                  flush=True)  # fmt: skip
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    for name, runs in results.items():
        ready = statistics.median(float(r["ready"]) for r in runs)
        step = statistics.median(float(r["first_step"]) for r in runs)
        print(
            f"median {name:>13}: process start -> ready {ready:.2f} s, -> first step {step:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
