"""Old import path of `ElasticTrainer`, kept for scripts: use `agent.trainer.elastic`."""

from agent.trainer.elastic import ElasticTrainer, ElasticTrainerSettings, PeerLost

__all__ = ["ElasticTrainer", "ElasticTrainerSettings", "PeerLost"]
