"""When and where a job checkpoints: `edl-agent run --checkpoint-*` flags and ``EDL_CHECKPOINT_*``.

The agent parses them (flags override variables), checks the store at start, and hands them
to every trainer in its environment; a trainer run bare reads the same variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.checkpoints.store import CheckpointStore, job_url, open_store, scheme_of
from agent.errors import ConfigError
from agent.protocol import env as names
from edl_common.options import TEXT, Option, duration, integer, label, read

GROUP = "durable checkpoints"
OPTIONS: tuple[Option, ...] = (
    Option(
        "checkpoint_url",
        "--checkpoint-url",
        names.CHECKPOINT_URL,
        TEXT,
        None,
        "a directory every pod mounts (a ReadWriteMany volume), file:///dir, "
        "s3://bucket/prefix (the s3 extra; AWS_* variables), or another fsspec URL: gs://, "
        "az://, sftp://user@host/dir... (the fsspec extra; FSSPEC_* variables); the job's "
        "checkpoints go to <url>/<job> (default: none, no durable checkpoints)",
        GROUP,
        bad="nosuch://bucket",
    ),
    Option(
        "checkpoint_every_steps",
        "--checkpoint-every-steps",
        names.CHECKPOINT_EVERY_STEPS,
        integer(0),
        "0",
        "a checkpoint after this many steps (0: not by steps) ...",
        GROUP,
    ),
    Option(
        "checkpoint_every_seconds",
        "--checkpoint-every-seconds",
        names.CHECKPOINT_EVERY_SECONDS,
        duration(allow_zero=True),
        "300",
        "... or when this long has passed since the last one, whichever comes first (0: not "
        "by time)",
        GROUP,
    ),
    Option(
        "checkpoint_keep",
        "--checkpoint-keep",
        names.CHECKPOINT_KEEP,
        integer(1),
        "3",
        "checkpoints kept; older ones are pruned (keep at least 2: one to fall back to)",
        GROUP,
    ),
)
"""The checkpoint rows of `edl-agent run --elastic` (`edl_common.options`)."""

_DEFAULTS: dict[str, Any] = read(OPTIONS, {}, {})
"""The rows' defaults, parsed: `CheckpointSettings`' fields default to them."""


@dataclass(frozen=True)
class CheckpointSettings:
    """Durable checkpoints of a job; off without a URL."""

    url: str = ""
    """--checkpoint-url / EDL_CHECKPOINT_URL: a directory (a ReadWriteMany volume),
    ``file:///dir``, ``s3://bucket/prefix`` or another fsspec URL (``gs://``, ``sftp://``...);
    the job's checkpoints go to ``<url>/<job>``.
    Empty: no checkpoints."""
    every_steps: int = _DEFAULTS["checkpoint_every_steps"]
    """--checkpoint-every-steps / EDL_CHECKPOINT_EVERY_STEPS: checkpoint after this many steps
    (0: not by steps)."""
    every_seconds: float = _DEFAULTS["checkpoint_every_seconds"]
    """--checkpoint-every-seconds / EDL_CHECKPOINT_EVERY_SECONDS: checkpoint when this long has
    passed since the last one (0: not by time). With both, whichever comes first."""
    keep: int = _DEFAULTS["checkpoint_keep"]
    """--checkpoint-keep / EDL_CHECKPOINT_KEEP: checkpoints kept (older ones are pruned; at
    least 2 leaves one to fall back to when the newest is corrupt)."""

    def __post_init__(self) -> None:
        if self.every_steps < 0 or self.every_seconds < 0:
            raise ConfigError("checkpoint intervals must be >= 0")
        if self.keep < 1:
            raise ConfigError(f"--checkpoint-keep {self.keep}: keep at least 1")

    @property
    def enabled(self) -> bool:
        """True when a checkpoint URL is set."""
        return bool(self.url)

    def store(self, job: str) -> CheckpointStore:
        """Job `job`'s store (raises `ConfigError` for an unknown scheme)."""
        return open_store(job_url(self.url, job))

    def to_env(self) -> dict[str, str]:
        """The variables a trainer reads these settings from."""
        if not self.enabled:
            return {}
        return {
            names.CHECKPOINT_URL: self.url,
            names.CHECKPOINT_EVERY_STEPS: str(self.every_steps),
            names.CHECKPOINT_EVERY_SECONDS: str(self.every_seconds),
            names.CHECKPOINT_KEEP: str(self.keep),
        }

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], flags: Mapping[str, object] | None = None
    ) -> CheckpointSettings:
        """Flags (when given and set) over ``EDL_CHECKPOINT_*``; raises `ConfigError`."""
        values = read(OPTIONS, flags or {}, env)
        url = values["checkpoint_url"] or ""
        where = label(OPTIONS, "checkpoint_url")
        if url and scheme_of(url) == "file" and "://" not in url and not url.startswith("/"):
            raise ConfigError(f"{where} {url!r}: give an absolute path or a URL")
        if url:
            try:
                open_store(url)  # an unknown scheme or a bad URL is a usage error, found now
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from e
        return cls(
            url,
            values["checkpoint_every_steps"],
            values["checkpoint_every_seconds"],
            values["checkpoint_keep"],
        )
