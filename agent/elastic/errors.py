"""Exception types of elastic training, agent side; each keeps its cause (`raise ... from e`).

The ones both processes share (`ElasticError`, `RendezvousTimeout`, `StateTransferError`) are
`agent.protocol.errors`'.
"""

from __future__ import annotations

from agent.protocol.errors import ElasticError


class StoreUnavailable(ElasticError):
    """The membership store could not be reached or answered with an error."""


class WatchForbidden(StoreUnavailable):
    """The store may be read but not watched (RBAC without ``watch``): the agent polls."""


class WorldRecordInvalid(ElasticError):
    """The stored world record is not a consistent world (edited by hand, truncated, ...)."""
