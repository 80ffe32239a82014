"""PyTorch's own DataLoader, fed by the elastic loader's planned batches (`agent.trainer.data`).

This module imports torch; the agent process never imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from torch.utils.data import DataLoader


def data_loader(dataset: Any, batches: Iterable[list[int]], options: Mapping[str, Any]) -> Any:
    """``DataLoader(dataset, batch_sampler=batches, **options)``.

    With workers, ``persistent_workers`` defaults to True: a new pass (the next epoch, or a
    re-plan after a world change) then reuses them, and torch drops what they loaded ahead.
    """
    kwargs = dict(options)
    if int(kwargs.get("num_workers", 0)) > 0:
        kwargs.setdefault("persistent_workers", True)
    return DataLoader(dataset, batch_sampler=batches, **kwargs)
