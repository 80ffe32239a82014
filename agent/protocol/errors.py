"""Errors of elastic training that both processes raise or handle; each keeps its cause."""

from __future__ import annotations

from agent.errors import AgentError


class ElasticError(AgentError):
    """Base class of every elastic-training error, agent side and trainer side."""


class ProtocolError(ElasticError):
    """A control-channel message that does not parse (a truncated file, another version)."""


class RendezvousTimeout(ElasticError):
    """A phase of a rescale (drain, rendezvous, init) ran past its deadline."""


class StateTransferError(ElasticError):
    """Saving, loading or broadcasting the training state failed."""
