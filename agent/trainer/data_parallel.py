"""`ElasticDataParallel`: the framework's data-parallel model, in every world the trainer joins.

``ElasticDataParallel(model, optimizer, trainer)`` returns the framework's own wrapper module
(`agent.trainer.frameworks.torch.data_parallel` around ``DistributedDataParallel``,
`agent.trainer.frameworks.paddle.data_parallel` for Paddle), built for the trainer's current
world and rebuilt on the group of each next one, in-process, after the state hand-off. Its
gradient all-reduce stays the framework's: bucketed, launched from backward hooks while
backward still runs. Each rank's gradient is weighted by its share of the fixed global batch
(`StepPlan.share`) and the weighted gradients are summed, so with the script's ordinary
mean-reduced loss the update is the one a single process would make on the whole global
batch, however unevenly the batch is split (an empty share weighs 0).

`model` and `optimizer` are what the training state is made of (the model unwrapped: the
state's keys are the model's own). Keywords go to the framework's wrapper (e.g. DDP's
``bucket_cap_mb``, ``find_unused_parameters``, ``gradient_as_bucket_view``).

Importing this module imports no framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.trainer.elastic import ElasticTrainer


class ElasticDataParallel:
    """Builds the framework's data-parallel model (the instance returned is the framework's)."""

    def __new__(cls, model: Any, optimizer: Any, trainer: ElasticTrainer, **options: Any) -> Any:
        """`model` wrapped by the trainer's framework; its state with `optimizer`'s handed over."""
        trainer.attach_model(model, optimizer)
        return trainer.collective.data_parallel(model, trainer, options)
