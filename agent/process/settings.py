"""Agent settings: the option tables of `edl-agent run`, and the frozen root they build.

`OPTIONS` (every run) and `ELASTIC_OPTIONS` (``--elastic``, `agent.elastic.option_table`)
are `edl_common.options` rows:
argparse, the environment and the tables in docs/agent.md and docs/elastic.md come from
them. `AgentSettings` groups the values by concern (the exporter, the trainer process, the
elastic job) and is validated once; every error is one `ConfigError` line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.protocol import env as names
from agent.trainer import frameworks
from edl_common.errors import ConfigError
from edl_common.options import (
    PATH,
    TEXT,
    Option,
    choice,
    duration,
    integer,
    read,
)

if TYPE_CHECKING:
    from agent.elastic.options import ElasticOptions

ENV_PREFIX = "EDL_AGENT_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _agent(name: str, flag_name: str | None = None) -> tuple[str, str]:
    return "--" + (flag_name or name).replace("_", "-"), ENV_PREFIX + name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("host", *_agent("host"), TEXT, "0.0.0.0", "address /metrics listens on", "exporter"),
    Option(
        "port",
        *_agent("port"),
        integer(0, 65535),
        "9400",
        "port of /metrics, /healthz, /readyz; 0 picks a free one (printed in the first log line)",
        "exporter",
    ),
    Option(
        "linger_seconds",
        *_agent("linger_seconds"),
        duration(allow_zero=True),
        "0",
        "keep serving /metrics this long after the trainer ended, so a last scrape sees the "
        "final counters (a signal ends it early)",
        "exporter",
    ),
    Option(
        "metrics_dir",
        *_agent("metrics_dir"),
        PATH,
        None,
        "directory of the trainer's reports (default: a temporary one, removed at exit); an "
        "emptyDir keeps counters across agent restarts",
        "trainer",
    ),
    Option(
        "flush_seconds",
        *_agent("flush_seconds"),
        duration(),
        "1",
        "how often the trainer rewrites its report",
        "trainer",
    ),
    Option(
        "stop_grace_seconds",
        *_agent("stop_grace_seconds"),
        duration(allow_zero=True),
        "25",
        "after a forwarded SIGTERM/SIGINT, how long the trainer's process group may take "
        "before SIGKILL; keep it below the pod's terminationGracePeriodSeconds",
        "trainer",
    ),
    Option(
        "framework",
        "--framework",
        names.FRAMEWORK,
        choice(frameworks.AUTO, *frameworks.FRAMEWORKS),
        frameworks.AUTO,
        "the trainer's framework (also passed to it); auto: the one whose variables the agent "
        "was given, in elastic training the one the warm trainer reports having imported",
        "trainer",
    ),
    Option(
        "log_level",
        *_agent("log_level"),
        choice(*LOG_LEVELS, fold=True),
        "INFO",
        "agent log level (lines start with edl-agent: on stderr)",
        "trainer",
    ),
)
"""Options of every `edl-agent run`."""


@dataclass(frozen=True)
class ExporterSettings:
    """Where the agent serves `/metrics`, `/healthz` and `/readyz`."""

    host: str
    """Listen address; tests use 127.0.0.1."""
    port: int
    """Listen port; 0 picks a free one."""
    linger_seconds: float
    """Seconds to keep serving after the trainer ended (a last scrape sees the final counts)."""


@dataclass(frozen=True)
class TrainerSettings:
    """How the agent runs the trainer process."""

    metrics_dir: Path | None
    """Directory of the trainer's reports; None: a temporary one, removed at exit."""
    flush_seconds: float
    """Seconds between the trainer's report rewrites."""
    stop_grace_seconds: float
    """Seconds from a forwarded SIGTERM to SIGKILL."""
    framework: str
    """A registered framework (`paddle`, `torch`) or `auto`."""


@dataclass(frozen=True)
class AgentSettings:
    """Everything `edl-agent run` was told, grouped by concern and validated once.

    The fields have no defaults: `OPTIONS` holds each one once (`from_env({})` gives them).
    """

    exporter: ExporterSettings
    trainer: TrainerSettings
    log_level: str
    elastic: ElasticOptions | None = None
    """The elastic job (``--elastic``): membership, phase timeouts, durable checkpoints."""

    def __post_init__(self) -> None:
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(f"unknown log level {self.log_level!r}")
        if self.trainer.framework != frameworks.AUTO:
            frameworks.get(self.trainer.framework)  # raises ConfigError naming the known ones

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> AgentSettings:
        """The root from `read(OPTIONS, ...)` values (the elastic part is added by the CLI)."""
        return cls(
            exporter=ExporterSettings(values["host"], values["port"], values["linger_seconds"]),
            trainer=TrainerSettings(
                values["metrics_dir"],
                values["flush_seconds"],
                values["stop_grace_seconds"],
                values["framework"],
            ),
            log_level=values["log_level"],
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AgentSettings:
        """Defaults, overridden by every variable of `OPTIONS` that is set and not empty."""
        return cls.from_values(read(OPTIONS, {}, env))
