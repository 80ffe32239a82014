"""Exception types of elastic training; each keeps its cause (`raise ... from e`)."""

from __future__ import annotations

from agent.errors import AgentError


class ElasticError(AgentError):
    """Base class for every error raised by `agent.elastic`."""


class StoreUnavailable(ElasticError):
    """The membership store could not be reached or answered with an error."""


class StoreConflict(ElasticError):
    """A compare-and-swap lost: someone else wrote the record first."""


class WorldRecordInvalid(ElasticError):
    """The stored world record is not a consistent world (edited by hand, truncated, ...)."""


class RendezvousTimeout(ElasticError):
    """A phase of a rescale (drain, rendezvous, init) ran past its deadline."""


class StateTransferError(ElasticError):
    """Saving, loading or broadcasting the training state failed."""
