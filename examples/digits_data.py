"""What the digits examples share, free of any framework: the data and the elastic flags."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

Arrays = tuple[
    npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]
]


def load_data(seed: int) -> Arrays:
    """The 1797 8x8 digits bundled with scikit-learn (no download), 80/20 split, scaled to 0-1."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=y
    )
    return x_train, y_train, x_test, y_test


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
        help="tests: a file holding how many global steps the job may take; past it every "
        "rank waits at the step boundary (still rescaling) until the file allows more "
        "(agent.trainer.step_gate; default: no gate)",
    )
    ns = parser.parse_args(argv)
    if ns.epochs < 1 or ns.global_batch < 1 or ns.hidden < 1:
        parser.error("--epochs, --global-batch and --hidden must be >= 1")
    return ns
