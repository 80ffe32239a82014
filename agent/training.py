"""Old import path of the training API, kept for scripts: use `agent.trainer.session`."""

from agent.trainer.session import TrainerSettings, TrainingSession, start_session

__all__ = ["TrainerSettings", "TrainingSession", "start_session"]
