"""Agent settings: the option tables of `edl-agent run`, and the frozen root they build.

`OPTIONS` (every run) and `ELASTIC_OPTIONS` (``--elastic``) are `edl_common.options` rows:
argparse, the environment and the tables in docs/agent.md and docs/elastic.md come from
them. `AgentSettings` groups the values by concern (the exporter, the trainer process, the
elastic job) and is validated once; every error is one `ConfigError` line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.protocol import env as names
from agent.trainer import frameworks
from edl_common.errors import ConfigError
from edl_common.options import (
    PATH,
    SWITCH,
    TEXT,
    Option,
    choice,
    duration,
    integer,
    read,
)

if TYPE_CHECKING:
    from agent.elastic.runner import ElasticOptions

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

ELASTIC = "elastic training"
MEMBERSHIP = "membership"
PHASES = "rescale phases"

ELASTIC_OPTIONS: tuple[Option, ...] = (
    Option("elastic", "--elastic", None, SWITCH, None, "join an elastic job", ELASTIC),
    Option(
        "job", "--job", names.JOB, TEXT, None, "job name; agents of one job train together", ELASTIC
    ),
    Option(
        "membership",
        "--membership",
        "EDL_MEMBERSHIP",
        TEXT,
        None,
        "local:/dir (files on one machine) or kubernetes (Leases and a ConfigMap)",
        ELASTIC,
        bad="etcd://nowhere",
    ),
    Option(
        "min_world",
        "--min",
        "EDL_MIN_WORLD",
        integer(1),
        "1",
        "smallest world: below it the job pauses",
        ELASTIC,
    ),
    Option(
        "max_world",
        "--max",
        "EDL_MAX_WORLD",
        integer(1),
        "64",
        "largest world: members beyond it wait as stand-bys",
        ELASTIC,
    ),
    Option(
        "on_finished",
        "--on-finished",
        "EDL_ON_FINISHED",
        choice("idle", "exit", "scale-to-zero"),
        "idle",
        "once the job is finished: idle (no trainer, ready, until SIGTERM; what a Deployment "
        "needs), exit 0 (a Job, a local run) or scale-to-zero (idle, and scale the Deployment "
        "named by --deployment to 0 with an Event, freeing its resources)",
        ELASTIC,
    ),
    Option(
        "deployment",
        "--deployment",
        "EDL_DEPLOYMENT",
        TEXT,
        None,
        "this job's Deployment, for --on-finished scale-to-zero (it needs get/patch on it and "
        "its scale subresource)",
        ELASTIC,
    ),
    Option(
        "member_id",
        None,
        "EDL_MEMBER_ID",
        TEXT,
        None,
        "member name (default: POD_NAME, else host name and pid)",
        ELASTIC,
    ),
    Option(
        "advertise_host",
        None,
        "EDL_ADVERTISE_HOST",
        TEXT,
        None,
        "where peers reach this trainer (default: POD_IP, else 127.0.0.1)",
        ELASTIC,
    ),
    Option(
        "trainer_ports",
        None,
        "EDL_TRAINER_PORTS",
        TEXT,
        None,
        "two ports, comma separated, where rank 0's trainer answers its generation's "
        "rendezvous (generations alternate), or auto: free ones below the ephemeral range "
        "(default: 29543,29544; auto with local: membership, where members share a network "
        "namespace)",
        ELASTIC,
        bad="29543",
    ),
    Option(
        "elastic_dir",
        None,
        "EDL_ELASTIC_DIR",
        PATH,
        None,
        "this member's control channel and local state copy (default: a temporary dir)",
        ELASTIC,
    ),
    Option(
        "heartbeat_interval",
        None,
        "EDL_HEARTBEAT_INTERVAL",
        duration(),
        "1s",
        "time between heartbeat renewals",
        MEMBERSHIP,
    ),
    Option(
        "ttl",
        None,
        "EDL_MEMBER_TTL",
        duration(),
        "10s",
        "a member whose heartbeat has not changed for this long is gone (more than two "
        "heartbeat intervals)",
        MEMBERSHIP,
        bad="1",
    ),
    Option(
        "debounce",
        None,
        "EDL_DEBOUNCE",
        duration(allow_zero=True),
        "1s",
        "the live set must be still this long before a new generation is written (a burst of "
        "joins becomes one)",
        MEMBERSHIP,
    ),
    Option(
        "max_debounce",
        None,
        "EDL_MAX_DEBOUNCE",
        duration(allow_zero=True),
        "5s",
        "a pending change is written after this long even if joins keep coming",
        MEMBERSHIP,
    ),
    Option(
        "poll_interval",
        None,
        "EDL_POLL_INTERVAL",
        duration(),
        "200ms",
        "time between reads of the membership store",
        MEMBERSHIP,
    ),
    Option(
        "drain_timeout",
        None,
        "EDL_DRAIN_TIMEOUT",
        duration(),
        "30s",
        "a trainer asked to stop gets this long to reach a step boundary (then SIGTERM, 5 s, "
        "SIGKILL); a live trainer handed a new world gets this long to take it",
        PHASES,
    ),
    Option(
        "init_timeout",
        None,
        "EDL_INIT_TIMEOUT",
        duration(),
        "2m0s",
        "a new trainer must have joined its collective within this long",
        PHASES,
    ),
    Option(
        "regroup_timeout",
        None,
        "EDL_REGROUP_TIMEOUT",
        duration(),
        "20s",
        "after a broken collective without a membership change, wait this long before forcing "
        "a fresh generation of the same members",
        PHASES,
    ),
    Option(
        "max_resets",
        None,
        "EDL_MAX_RESETS",
        integer(0),
        "5",
        "forced generations in a row without a completed step before giving up",
        PHASES,
    ),
    Option(
        "stall_timeout",
        None,
        "EDL_STALL_TIMEOUT",
        duration(allow_zero=True),
        "10s",
        "a trainer stopped (SIGSTOP) this long, or in its training loop without rewriting its "
        "report for three times this long, stands still: it is killed and this member leaves "
        "the job",
        PHASES,
    ),
    Option(
        "backend",
        None,
        "EDL_DISTRI_BACKEND",
        choice("gloo", "nccl"),
        None,
        "the trainer's collective backend (default: nccl if /dev/nvidia0, else gloo)",
        PHASES,
    ),
)
"""Options of `edl-agent run --elastic` (the checkpoint rows are `agent.checkpoints.settings`)."""


@dataclass(frozen=True)
class ExporterSettings:
    """Where the agent serves `/metrics`, `/healthz` and `/readyz`."""

    host: str = "0.0.0.0"
    """Listen address; tests use 127.0.0.1."""
    port: int = 9400
    """Listen port; 0 picks a free one."""
    linger_seconds: float = 0.0
    """Seconds to keep serving after the trainer ended (a last scrape sees the final counts)."""


@dataclass(frozen=True)
class TrainerSettings:
    """How the agent runs the trainer process."""

    metrics_dir: Path | None = None
    """Directory of the trainer's reports; None: a temporary one, removed at exit."""
    flush_seconds: float = 1.0
    """Seconds between the trainer's report rewrites."""
    stop_grace_seconds: float = 25.0
    """Seconds from a forwarded SIGTERM to SIGKILL."""
    framework: str = frameworks.AUTO
    """A registered framework (`paddle`, `torch`) or `auto`."""


@dataclass(frozen=True)
class AgentSettings:
    """Everything `edl-agent run` was told, grouped by concern and validated once."""

    exporter: ExporterSettings = field(default_factory=ExporterSettings)
    trainer: TrainerSettings = field(default_factory=TrainerSettings)
    log_level: str = "INFO"
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
