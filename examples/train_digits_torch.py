"""The digits MLP of `examples.train_digits` in PyTorch, data-parallel over gloo, measured by EDL.

Run alone (one rank, no agent)::

    python -m examples.train_digits_torch --epochs 20

or under the agent, one agent per rank, with torchrun's variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT)::

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        edl-agent run --port 9400 -- python -m examples.train_digits_torch

Gradients are averaged by an explicit, timed all-reduce
(`agent.trainer.frameworks.torch.gradients`) instead of `DistributedDataParallel`'s hook-driven
one, so the agent can report communication time honestly (see that module for what DDP's
overlap does to the figure). Same data, split and step plan as the Paddle script.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from agent.trainer.frameworks.torch.gradients import GradientAllReduce, broadcast_parameters
from agent.trainer.session import start_session
from agent.trainer.step_gate import StepGate
from examples.digits_data import STEP_GATE_HELP, hold_at_gate, load_data


def build_model(hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(64, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-gate", type=Path, help=STEP_GATE_HELP)
    ns = parser.parse_args(argv)
    if ns.epochs < 1 or ns.batch_size < 1 or ns.hidden < 1:
        parser.error("--epochs, --batch-size and --hidden must be >= 1")
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    session = start_session()
    rank, world_size = session.rank, session.world_size
    torch.manual_seed(args.seed)
    if world_size > 1:
        dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    x_train, y_train, x_test, y_test = load_data(args.seed)
    model = build_model(args.hidden)
    if world_size > 1:
        broadcast_parameters(model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    allreduce = GradientAllReduce(model.parameters(), session.recorder, world_size)
    rec = session.recorder
    global_batch = args.batch_size * world_size
    steps_per_epoch = len(x_train) // global_batch
    if steps_per_epoch == 0:
        print(
            f"batch size {args.batch_size} x {world_size} ranks exceeds the data", file=sys.stderr
        )
        return 2
    gate = None if args.step_gate is None else StepGate(args.step_gate)
    steps = 0
    for epoch in range(args.epochs):
        order = np.random.default_rng(args.seed + epoch).permutation(len(x_train))
        loss = None
        for s in range(steps_per_epoch):
            lo = s * global_batch + rank * args.batch_size
            idx = order[lo : lo + args.batch_size]
            hold_at_gate(gate, steps)
            rec.begin_step()
            loss = F.cross_entropy(
                model(torch.from_numpy(x_train[idx])), torch.from_numpy(y_train[idx])
            )
            loss.backward()
            allreduce()
            optimizer.step()
            optimizer.zero_grad()
            rec.end_step(len(idx))
            steps += 1
        if rank == 0 and loss is not None and (epoch + 1) % max(1, args.epochs // 5) == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {float(loss):.4f}", flush=True)
    model.eval()
    with torch.no_grad():
        predicted = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    accuracy = float((predicted == y_test).mean())
    print(
        f"rank {rank}/{world_size}: test accuracy {accuracy:.4f} after {steps} steps "
        f"({rec.samples} samples, comm {rec.comm_seconds:.3f} s)",
        flush=True,
    )
    if world_size > 1:
        dist.destroy_process_group()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
