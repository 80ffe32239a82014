"""A small Paddle MLP on scikit-learn's bundled digits, data-parallel over gloo, measured by EDL.

Run alone (one rank, no agent)::

    python -m examples.train_digits --epochs 20

or under the agent, one agent per rank (see tests/support/local_agents.py)::

    edl-agent run --port 9400 -- python -m examples.train_digits

The world comes from PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM / PADDLE_TRAINER_ENDPOINTS /
PADDLE_CURRENT_ENDPOINT / PADDLE_MASTER (+ PADDLE_DISTRI_BACKEND=gloo on CPU). Gradients are
averaged by an explicit, timed all-reduce (`agent.trainer.frameworks.paddle.gradients`) instead of
`paddle.DataParallel`'s hidden one, so the agent can report communication time honestly.
Every rank sees the same shuffled order each epoch and takes its own disjoint slice of each
global batch, so all ranks take the same number of steps (no rank waits forever in all-reduce).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F

from agent.trainer.frameworks.paddle.gradients import GradientAllReduce, broadcast_parameters
from agent.trainer.session import start_session
from agent.trainer.step_gate import StepGate
from examples.digits_data import STEP_GATE_HELP, hold_at_gate
from examples.digits_data import load_data as load_data  # re-exported: bench imports it here


@dataclass(frozen=True)
class Options:
    """Training options (command-line flags)."""

    epochs: int = 20
    batch_size: int = 32
    """Samples per rank per step."""
    learning_rate: float = 0.01
    hidden: int = 64
    seed: int = 0
    step_gate: Path | None = None
    """Tests: a file holding how many steps the job may take (`agent.trainer.step_gate`)."""


def parse_options(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=Options.epochs)
    parser.add_argument("--batch-size", type=int, default=Options.batch_size)
    parser.add_argument("--learning-rate", type=float, default=Options.learning_rate)
    parser.add_argument("--hidden", type=int, default=Options.hidden)
    parser.add_argument("--seed", type=int, default=Options.seed)
    parser.add_argument("--step-gate", type=Path, help=STEP_GATE_HELP)
    ns = parser.parse_args(argv)
    if ns.epochs < 1 or ns.batch_size < 1 or ns.hidden < 1:
        parser.error("--epochs, --batch-size and --hidden must be >= 1")
    return Options(ns.epochs, ns.batch_size, ns.learning_rate, ns.hidden, ns.seed, ns.step_gate)


def build_model(hidden: int) -> Any:
    return paddle.nn.Sequential(
        paddle.nn.Linear(64, hidden),
        paddle.nn.ReLU(),
        paddle.nn.Linear(hidden, hidden),
        paddle.nn.ReLU(),
        paddle.nn.Linear(hidden, 10),
    )


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_options(sys.argv[1:] if argv is None else argv)
    session = start_session()
    rank, world_size = session.rank, session.world_size
    paddle.seed(opts.seed)
    if world_size > 1:
        dist.init_parallel_env()
    x_train, y_train, x_test, y_test = load_data(opts.seed)
    model = build_model(opts.hidden)
    if world_size > 1:
        broadcast_parameters(model.parameters())
    optimizer = paddle.optimizer.Adam(
        learning_rate=opts.learning_rate, parameters=model.parameters()
    )
    allreduce = GradientAllReduce(model.parameters(), session.recorder, world_size)
    rec = session.recorder
    global_batch = opts.batch_size * world_size
    steps_per_epoch = len(x_train) // global_batch
    if steps_per_epoch == 0:
        print(
            f"batch size {opts.batch_size} x {world_size} ranks exceeds the data", file=sys.stderr
        )
        return 2
    gate = None if opts.step_gate is None else StepGate(opts.step_gate)
    steps = 0
    for epoch in range(opts.epochs):
        order = np.random.default_rng(opts.seed + epoch).permutation(len(x_train))
        loss = None
        for s in range(steps_per_epoch):
            lo = s * global_batch + rank * opts.batch_size
            idx = order[lo : lo + opts.batch_size]
            hold_at_gate(gate, steps)
            rec.begin_step()
            logits = model(paddle.to_tensor(x_train[idx]))
            loss = F.cross_entropy(logits, paddle.to_tensor(y_train[idx]))
            loss.backward()
            allreduce()
            optimizer.step()
            optimizer.clear_grad()
            rec.end_step(len(idx))
            steps += 1
        if rank == 0 and loss is not None and (epoch + 1) % max(1, opts.epochs // 5) == 0:
            print(f"epoch {epoch + 1}/{opts.epochs} loss {float(loss):.4f}", flush=True)
    model.eval()
    with paddle.no_grad():
        predicted = model(paddle.to_tensor(x_test)).argmax(axis=1).numpy()
    accuracy = float((predicted == y_test).mean())
    print(
        f"rank {rank}/{world_size}: test accuracy {accuracy:.4f} after {steps} steps "
        f"({rec.samples} samples, comm {rec.comm_seconds:.3f} s)",
        flush=True,
    )
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
