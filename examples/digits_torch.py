"""The digits data as PyTorch datasets, and the final figures of the data-parallel examples."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

from examples.digits_data import load_data, publish


def digits_datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The training and test digits (`examples.digits_data.load_data`) as tensor datasets."""
    x_train, y_train, x_test, y_test = load_data(seed)
    train = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    return train, TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test))


def device_of(name: str) -> torch.device:
    """`name` as a device; ``cuda`` is this rank's GPU (torchrun's and the agent's LOCAL_RANK)."""
    if name == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(name)


def report(model: torch.nn.Module, test: TensorDataset, rank: int, result: Path | None,
           started: float) -> None:  # fmt: skip
    """Test accuracy and training time; rank 0 writes them to `result` (JSON)."""
    seconds = time.perf_counter() - started  # the training, not the evaluation
    model.eval()
    x, y = test.tensors
    device = next(model.parameters()).device
    with torch.no_grad():
        accuracy = float((model(x.to(device)).argmax(dim=1).cpu() == y).float().mean())
    publish(rank, result, accuracy, dist.get_world_size(), seconds)
