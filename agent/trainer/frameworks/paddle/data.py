"""Paddle's own DataLoader, fed by the elastic loader's planned batches (`agent.trainer.data`).

Paddle's defaults stand (``persistent_workers=False``): its persistent workers' reset between
passes polls every 0.5 s (Paddle 3.3.1), longer than starting new workers here.

This module imports Paddle; the agent process never imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import paddle


def data_loader(dataset: Any, batches: Iterable[list[int]], options: Mapping[str, Any]) -> Any:
    """``paddle.io.DataLoader(dataset, batch_sampler=batches, **options)``."""
    # Paddle types the batch sampler as its BatchSampler, but only iterates it (and len()s it).
    return paddle.io.DataLoader(dataset, batch_sampler=batches, **options)  # type: ignore[arg-type]
