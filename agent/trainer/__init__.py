"""The trainer library: what a training script imports (never the agent process's modules).

- `agent.trainer.session`: `start_session`, the world and the step recorder (every script).
- `agent.trainer.elastic`: `ElasticTrainer`, framework-neutral elastic training.
- `agent.trainer.sampler`: `ElasticSampler`, exactly-once data across world changes.
- `agent.trainer.frameworks`: the registry; `paddle/` and `torch/` hold the only code that
  imports a framework (e.g. each framework's timed `gradients.GradientAllReduce`).

Importing this package imports no framework.
"""
