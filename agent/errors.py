"""The agent's own exception types, one per failure domain.

Each keeps its cause (`raise ... from e`) and carries a message written for the person running
`edl-agent`: the CLI prints it as one line and exits non-zero.
"""

from __future__ import annotations

from edl_common.errors import ConfigError

__all__ = ["AgentError", "ConfigError", "ExporterError", "MetricsDirError", "TrainerStartError"]


class AgentError(Exception):
    """Base of every error the agent reports to its user.

    `ConfigError` (a bad setting) is `edl_common`'s, the one the adapter raises too.
    """


class MetricsDirError(AgentError):
    """The metrics directory shared by trainer and agent cannot be used."""


class ExporterError(AgentError):
    """The HTTP exporter cannot serve (for example, its port is in use)."""


class TrainerStartError(AgentError):
    """The trainer command could not be started at all."""
