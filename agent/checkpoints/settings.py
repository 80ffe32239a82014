"""When and where a job checkpoints: `edl-agent run --checkpoint-*` flags and ``EDL_CHECKPOINT_*``.

The agent parses them (flags override variables), checks the store at start, and hands them
to every trainer in its environment; a trainer run bare reads the same variables.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from agent.checkpoints.store import CheckpointStore, job_url, open_store, scheme_of
from agent.errors import ConfigError
from agent.protocol import env as names

FLAGS = (
    "checkpoint_url",
    "checkpoint_every_steps",
    "checkpoint_every_seconds",
    "checkpoint_keep",
)
"""The argparse destinations of the checkpoint flags."""


@dataclass(frozen=True)
class CheckpointSettings:
    """Durable checkpoints of a job; off without a URL."""

    url: str = ""
    """--checkpoint-url / EDL_CHECKPOINT_URL: a directory (a ReadWriteMany volume) or
    ``file:///dir``; the job's checkpoints go to ``<url>/<job>``. Empty: no checkpoints."""
    every_steps: int = 0
    """--checkpoint-every-steps / EDL_CHECKPOINT_EVERY_STEPS: checkpoint after this many steps
    (0: not by steps)."""
    every_seconds: float = 300.0
    """--checkpoint-every-seconds / EDL_CHECKPOINT_EVERY_SECONDS: checkpoint when this long has
    passed since the last one (0: not by time). With both, whichever comes first."""
    keep: int = 3
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
        flags = flags or {}

        def pick(flag: str, var: str) -> str:
            value = flags.get(flag)
            return str(value).strip() if value not in (None, "") else env.get(var, "").strip()

        url = pick("checkpoint_url", names.CHECKPOINT_URL)
        raw = {
            "every_steps": pick("checkpoint_every_steps", names.CHECKPOINT_EVERY_STEPS),
            "every_seconds": pick("checkpoint_every_seconds", names.CHECKPOINT_EVERY_SECONDS),
            "keep": pick("checkpoint_keep", names.CHECKPOINT_KEEP),
        }
        try:
            steps = int(raw["every_steps"]) if raw["every_steps"] else cls.every_steps
            seconds = float(raw["every_seconds"]) if raw["every_seconds"] else cls.every_seconds
            keep = int(raw["keep"]) if raw["keep"] else cls.keep
        except ValueError as e:
            raise ConfigError(f"checkpoint setting: {e}") from e
        if url and scheme_of(url) == "file" and "://" not in url and not url.startswith("/"):
            raise ConfigError(f"--checkpoint-url {url!r}: give an absolute path or a URL")
        if url:
            open_store(url)  # an unknown scheme or a bad URL is a usage error, found now
        return cls(url, steps, seconds, keep)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The checkpoint flags of `edl-agent run --elastic`."""
    group = parser.add_argument_group("durable checkpoints")
    group.add_argument(
        "--checkpoint-url",
        help="directory (a ReadWriteMany volume) or URL for the job's checkpoints "
        "(EDL_CHECKPOINT_URL; default: none)",
    )
    group.add_argument(
        "--checkpoint-every-steps",
        help="checkpoint every N steps (EDL_CHECKPOINT_EVERY_STEPS, 0: off)",
    )
    group.add_argument(
        "--checkpoint-every-seconds",
        help="checkpoint every T seconds, whichever of N and T comes first "
        "(EDL_CHECKPOINT_EVERY_SECONDS, 300; 0: off)",
    )
    group.add_argument(
        "--checkpoint-keep", help="checkpoints kept, older ones pruned (EDL_CHECKPOINT_KEEP, 3)"
    )
