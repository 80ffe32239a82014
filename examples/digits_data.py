"""What the digits examples share, free of any framework: the data, the flags of the elastic
and data-parallel examples, and the step gate of the fixed-world examples."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.trainer.step_gate import StepGate

Arrays = tuple[
    npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]
]


TEST_SHARE = 0.2
STEP_GATE_HELP = (
    "tests: a file holding how many global steps the job may take; past it every rank waits "
    "at the step boundary until the file allows more (agent.trainer.step_gate; default: no gate)"
)


def hold_at_gate(gate: StepGate | None, steps_done: int) -> None:
    """A fixed-world example's step boundary: waits while `gate` allows no more steps."""
    if gate is not None and not gate.wait(steps_done):
        print(f"step gate {gate.path} held step {steps_done} too long; opening it", file=sys.stderr)


def digits_file() -> Path:
    """scikit-learn's bundled digits CSV, found without importing scikit-learn.

    Importing it (scipy with it) took ~1 s of every trainer's start, a joiner's included,
    for a file numpy reads in milliseconds.
    """
    spec = importlib.util.find_spec("sklearn")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    raise FileNotFoundError("scikit-learn's digits.csv.gz not found: pip install scikit-learn")


def stratified_split(y: npt.NDArray[np.int64], share: float, seed: int) -> npt.NDArray[np.bool_]:
    """A test mask with ceil(share * n) rows, each class's share as near to it as counts allow."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(y, return_counts=True)
    n_test = math.ceil(share * len(y))
    exact = counts * n_test / len(y)
    per_class = np.floor(exact).astype(np.int64)
    short = n_test - int(per_class.sum())
    order = np.lexsort((rng.random(len(classes)), -(exact - per_class)))
    per_class[order[:short]] += 1
    test = np.zeros(len(y), dtype=np.bool_)
    for c, k in zip(classes, per_class, strict=True):
        rows = np.flatnonzero(y == c)
        test[rng.permutation(rows)[:k]] = True
    return test


def load_data(seed: int) -> Arrays:
    """The 1797 8x8 digits bundled with scikit-learn (no download), stratified 80/20 split,
    scaled to 0-1; shuffled by ``seed``."""
    table = np.loadtxt(digits_file(), delimiter=",")
    x = (table[:, :-1] / 16.0).astype(np.float32)
    y = table[:, -1].astype(np.int64)
    test = stratified_split(y, TEST_SHARE, seed)
    rng = np.random.default_rng(seed + 1)
    train_rows = rng.permutation(np.flatnonzero(~test))
    test_rows = rng.permutation(np.flatnonzero(test))
    return x[train_rows], y[train_rows], x[test_rows], y[test_rows]


def elastic_args(argv: Sequence[str], description: str) -> argparse.Namespace:
    """The flags of both elastic examples (`train_digits_elastic`, `train_digits_torch_elastic`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="simulated extra compute")
    parser.add_argument(
        "--sample-sleep",
        type=float,
        default=0.0,
        help="simulated compute per sample of this rank's share (seconds): throughput then "
        "grows with the number of workers, as real data-parallel compute does",
    )
    parser.add_argument(
        "--log-every", type=int, default=0, help="rank 0 prints its loss every N steps (0: never)"
    )
    parser.add_argument("--result", type=Path, help="rank 0 writes the final figures here")
    parser.add_argument(
        "--step-gate",
        type=Path,
        help=STEP_GATE_HELP.replace("(agent.", "(still rescaling; agent."),
    )
    ns = parser.parse_args(argv)
    if ns.epochs < 1 or ns.global_batch < 1 or ns.hidden < 1:
        parser.error("--epochs, --global-batch and --hidden must be >= 1")
    return ns


def publish(
    rank: int, result: Path | None, accuracy: float, world_size: int, seconds: float
) -> None:
    """A data-parallel example's final figures: printed by every rank, written by rank 0."""
    figures = {"accuracy": accuracy, "world_size": world_size, "train_seconds": seconds}
    print(f"rank {rank}: {json.dumps(figures)}", flush=True)
    if result is not None and rank == 0:
        result.write_text(json.dumps(figures))


def ddp_args(argv: Sequence[str], description: str) -> argparse.Namespace:
    """The flags of the data-parallel examples, plain and elastic alike (`train_digits_ddp*`,
    `train_digits_paddle_dp*`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument(
        "--batch-size", type=int, default=32, help="samples per rank per step (plain scripts)"
    )
    parser.add_argument(
        "--global-batch",
        type=int,
        default=64,
        help="samples per step, all ranks together, whatever the world (elastic scripts)",
    )
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=64, help="5000: a model of ~25M parameters")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument(
        "--device", default="cpu", help="cpu, or cuda (this rank's GPU: LOCAL_RANK) (PyTorch)"
    )
    parser.add_argument(
        "--step-sleep", type=float, default=0.0, help="simulated extra compute per step (tests)"
    )
    parser.add_argument("--result", type=Path, help="rank 0 writes the final figures here")
    ns = parser.parse_args(argv)
    if min(ns.epochs, ns.batch_size, ns.global_batch, ns.hidden) < 1 or ns.workers < 0:
        parser.error("--epochs, the batches and --hidden must be >= 1, --workers >= 0")
    return ns
