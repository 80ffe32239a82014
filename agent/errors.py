"""The agent's own exception types, one per failure domain.

Each keeps its cause (`raise ... from e`) and carries a message written for the person running
`edl-agent`: the CLI prints it as one line and exits non-zero.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error the agent reports to its user."""


class ConfigError(AgentError):
    """A setting from the command line or the environment is malformed."""


class MetricsDirError(AgentError):
    """The metrics directory shared by trainer and agent cannot be used."""


class ExporterError(AgentError):
    """The HTTP exporter cannot serve (for example, its port is in use)."""


class TrainerStartError(AgentError):
    """The trainer command could not be started at all."""
