"""The trainer library: everything a training script imports, from this one module.

Make a DistributedDataParallel (or ``paddle.DataParallel``) script elastic (docs/agent.md)::

    from agent.trainer import ElasticDataLoader, ElasticDataParallel, ElasticTrainer

    et = ElasticTrainer.start()                              # instead of init_process_group
    model = ElasticDataParallel(model, optimizer, et)        # instead of DDP(model)
    loader = ElasticDataLoader(dataset, 64, et, num_workers=2)  # 64: the global batch
    for epoch in et.epochs(10):                              # instead of range(10)
        for x, y in loader:
            ...                                              # the loop body, unchanged

- `ElasticTrainer`: joins each world the agent hands over, agrees on stops, hands the state
  over; `epochs(n)` is the epoch iterator (`steps()` the step iterator of the first API).
- `ElasticDataLoader`: this rank's share of each fixed global batch, through the framework's
  own DataLoader (workers, prefetch, pinned memory, collate function), exactly once.
- `ElasticDataParallel`: the framework's data-parallel model, rebuilt on each world's group,
  each rank's gradient weighted by its share of the global batch.
- `ElasticSampler`, `StepPlan`: the sample-id API underneath (``et.register`` + ``et.steps()``,
  `loss_scale`, `all_reduce_gradients`: the first API, unchanged).
- `start_session`, `TrainingSession`, `StepRecorder`: measured training without elasticity.
- `StepGate`, the settings dataclasses and `PeerLost`.

Old names, kept: every name above is also where it always was (``agent.trainer.elastic``,
``agent.trainer.sampler``, ``agent.trainer.session``...); ``agent.training.start_session``
is ``agent.trainer.start_session`` (docs/upgrade.md).

The names load on first use, so importing this package imports no framework and nothing
heavy (the agent process imports `agent.trainer.frameworks` for its descriptors). The
framework-specific parts live in `agent.trainer.frameworks` (one folder per framework).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.trainer.data import ElasticDataLoader as ElasticDataLoader
    from agent.trainer.data_parallel import ElasticDataParallel as ElasticDataParallel
    from agent.trainer.elastic import ElasticTrainer as ElasticTrainer
    from agent.trainer.errors import PeerLost as PeerLost
    from agent.trainer.recording import StepRecorder as StepRecorder
    from agent.trainer.sampler import ElasticSampler as ElasticSampler
    from agent.trainer.sampler import StepPlan as StepPlan
    from agent.trainer.session import TrainingSession as TrainingSession
    from agent.trainer.session import start_session as start_session
    from agent.trainer.settings import ElasticTrainerSettings as ElasticTrainerSettings
    from agent.trainer.settings import TrainerSettings as TrainerSettings
    from agent.trainer.step_gate import StepGate as StepGate

EXPORTS: dict[str, str] = {
    "ElasticTrainer": "agent.trainer.elastic",
    "ElasticDataLoader": "agent.trainer.data",
    "ElasticDataParallel": "agent.trainer.data_parallel",
    "ElasticSampler": "agent.trainer.sampler",
    "StepPlan": "agent.trainer.sampler",
    "PeerLost": "agent.trainer.errors",
    "StepRecorder": "agent.trainer.recording",
    "TrainingSession": "agent.trainer.session",
    "start_session": "agent.trainer.session",
    "ElasticTrainerSettings": "agent.trainer.settings",
    "TrainerSettings": "agent.trainer.settings",
    "StepGate": "agent.trainer.step_gate",
}
"""Public name -> the module that defines it."""

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    try:
        module = EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
