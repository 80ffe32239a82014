"""The trainer library's own errors (the ones both processes share are `agent.protocol.errors`)."""

from __future__ import annotations

from agent.protocol.errors import ElasticError


class PeerLost(ElasticError):
    """A collective failed: a peer died or left mid-step."""


class LeaveTraining(ElasticError):
    """This trainer process ends here with `status` (a rescale, a lost peer, an unusable store).

    Raised where the reason is found (joining a world, restoring state) and turned into the
    process's exit, with the state saved, by `ElasticTrainer`, the one place that exits.
    """

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why
