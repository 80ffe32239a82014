"""Agent settings: one frozen dataclass, built from `EDL_AGENT_*` variables, then CLI flags."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.protocol import env as names
from agent.trainer import frameworks

ENV_PREFIX = "EDL_AGENT_"
ENV_NAMES = {"framework": names.FRAMEWORK}
"""Fields read from a variable outside the prefix: the trainer reads the same one."""


def env_name(field: str) -> str:
    """The environment variable of setting `field`."""
    return ENV_NAMES.get(field, ENV_PREFIX + field.upper())


@dataclass(frozen=True)
class AgentSettings:
    """How `edl-agent run` serves and supervises.

    Each field has an `EDL_AGENT_<FIELD>` variable (`framework`: `EDL_FRAMEWORK`).
    """

    host: str = "0.0.0.0"
    """Address the exporter listens on (`EDL_AGENT_HOST`); tests use 127.0.0.1."""
    port: int = 9400
    """Port of `/metrics`, `/healthz`, `/readyz` (`EDL_AGENT_PORT`); 0 picks a free one."""
    metrics_dir: Path | None = None
    """Directory trainer reports go to (`EDL_AGENT_METRICS_DIR`); None: a temporary one that
    is removed at exit. Point it at an emptyDir to keep counters across agent restarts."""
    flush_seconds: float = 1.0
    """How often the trainer rewrites its report (`EDL_AGENT_FLUSH_SECONDS`)."""
    stop_grace_seconds: float = 25.0
    """After forwarding SIGTERM, how long the trainer may take before SIGKILL
    (`EDL_AGENT_STOP_GRACE_SECONDS`); keep it under the pod's termination grace period."""
    linger_seconds: float = 0.0
    """How long to keep serving `/metrics` after the trainer ended, so a last scrape sees the
    final counters (`EDL_AGENT_LINGER_SECONDS`)."""
    log_level: str = "INFO"
    """Agent log level (`EDL_AGENT_LOG_LEVEL`)."""
    framework: str = frameworks.AUTO
    """Framework of the trainer (`EDL_FRAMEWORK`): a registered name (`paddle`, `torch`), or
    `auto`: the one whose variables the agent was given, and in elastic training the one the
    trainer reports using."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0-65535, got {self.port}")
        if self.flush_seconds <= 0:
            raise ConfigError(f"flush seconds must be > 0, got {self.flush_seconds}")
        if self.stop_grace_seconds < 0 or self.linger_seconds < 0:
            raise ConfigError("grace and linger seconds must be >= 0")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"unknown log level {self.log_level!r}")
        if self.framework != frameworks.AUTO:
            frameworks.get(self.framework)  # raises ConfigError naming the known ones

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AgentSettings:
        """Defaults, overridden by any `EDL_AGENT_*` variable that is set and not empty."""
        return cls().with_overrides(
            {
                name: env[env_name(name)]
                for name in cls.__dataclass_fields__
                if env.get(env_name(name), "").strip()
            },
            source="environment",
        )

    def with_overrides(self, values: Mapping[str, Any], source: str = "flags") -> AgentSettings:
        """A copy with `values` (strings are converted to the field's type) applied."""
        converted: dict[str, Any] = {}
        for name, raw in values.items():
            if raw is None:
                continue
            default = getattr(AgentSettings(), name)
            try:
                if name == "metrics_dir":
                    converted[name] = Path(raw)
                elif isinstance(default, bool):
                    raise ConfigError(f"no boolean settings, got {name}")
                elif isinstance(default, int):
                    converted[name] = int(raw)
                elif isinstance(default, float):
                    converted[name] = float(raw)
                else:
                    converted[name] = str(raw)
            except ValueError as e:
                var = env_name(name) if source == "environment" else name
                raise ConfigError(f"{var}={raw!r} is not a valid {name.replace('_', ' ')}") from e
        return replace(self, **converted)
