"""The digits data as Paddle datasets, and the final figures of the data-parallel examples."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import paddle
import paddle.distributed as dist

from examples.digits_data import load_data, publish


class Digits(paddle.io.Dataset[Any]):
    """Samples as numpy arrays (Paddle's DataLoader workers cannot send Paddle tensors)."""

    def __init__(self, x: npt.NDArray[np.float32], y: npt.NDArray[np.int64]) -> None:
        super().__init__()
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.x[index], self.y[index]


def digits_datasets(seed: int) -> tuple[Digits, Digits]:
    """The training and test digits (`examples.digits_data.load_data`)."""
    x_train, y_train, x_test, y_test = load_data(seed)
    return Digits(x_train, y_train), Digits(x_test, y_test)


def report(model: Any, test: Digits, rank: int, result: Path | None, started: float) -> None:
    """Test accuracy and training time; rank 0 writes them to `result` (JSON)."""
    seconds = time.perf_counter() - started  # the training, not the evaluation
    model.eval()
    with paddle.no_grad():
        predicted = model(paddle.to_tensor(test.x)).argmax(axis=1).numpy()
    accuracy = float((predicted == test.y).mean())
    publish(rank, result, accuracy, dist.get_world_size(), seconds)
