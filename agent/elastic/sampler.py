"""Old import path of `ElasticSampler`, kept for scripts: use `agent.trainer.sampler`."""

from agent.trainer.sampler import ElasticSampler, StepPlan

__all__ = ["ElasticSampler", "StepPlan"]
