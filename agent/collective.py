"""Old import path of Paddle's timed gradient all-reduce, kept for scripts.

Use `agent.trainer.frameworks.paddle.gradients` (or `...torch.gradients` for PyTorch).
"""

from agent.trainer.frameworks.paddle.gradients import GradientAllReduce, broadcast_parameters

__all__ = ["GradientAllReduce", "broadcast_parameters"]
