"""Errors of durable checkpoints; each keeps its cause (`raise ... from e`)."""

from __future__ import annotations

from agent.errors import AgentError


class CheckpointError(AgentError):
    """Base class of every checkpoint error."""


class CheckpointStoreError(CheckpointError):
    """The checkpoint store cannot be read or written (a missing mount, permissions, I/O)."""


class CheckpointMissing(CheckpointStoreError):
    """An object the catalogue expected is not in the store (a partial write, a prune)."""


class CheckpointInvalid(CheckpointError):
    """A checkpoint fails its checks: unreadable manifest, missing or corrupt payload."""
