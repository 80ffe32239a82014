"""Every setting of the trainer program, read once from the environment its agent gave it.

The agent sets most of these when it starts a trainer (`agent.protocol.env` names them); a
script run bare reads none and trains alone, recording in memory. `TrainerSettings` is what
every measured script reads (`agent.trainer.session`); `ElasticTrainerSettings` what
`ElasticTrainer` adds. Durable checkpoints read their own rows (`agent.checkpoints.settings`),
the table the agent checks at start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.errors import ConfigError
from agent.protocol import env as names
from edl_common.ports import parse_port_range


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    return Path(raw) if raw else None


def _number(env: Mapping[str, str], name: str, default: float, old: str = "") -> float:
    raw = (env.get(name) or (env.get(old) if old else "") or "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError as e:
        raise ConfigError(f"{name}={raw!r} is not a number of seconds") from e


@dataclass(frozen=True)
class TrainerSettings:
    """How a trainer reports to its agent (every script that records steps)."""

    metrics_dir: Path | None = None
    """Where to write this incarnation's report (`EDL_METRICS_DIR`); None: record in memory."""
    incarnation: int = 0
    """Which start of the trainer this is, 1 for the first (`EDL_TRAINER_INCARNATION`)."""
    flush_seconds: float = 1.0
    """How often the report is rewritten (`EDL_METRICS_FLUSH_SECONDS`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TrainerSettings:
        """Reads the settings from the environment the agent gave the trainer."""
        try:
            incarnation = int(env.get(names.INCARNATION, "0") or "0")
        except ValueError as e:
            raise ConfigError(f"{names.INCARNATION} must be an integer") from e
        try:
            flush = float(env.get(names.FLUSH_SECONDS, "1.0") or "1.0")
        except ValueError as e:
            raise ConfigError(f"{names.FLUSH_SECONDS} must be a number of seconds") from e
        if flush <= 0:
            raise ConfigError(f"{names.FLUSH_SECONDS} must be > 0")
        return cls(_path(env, names.METRICS_DIR), incarnation, flush)


@dataclass(frozen=True)
class ElasticTrainerSettings:
    """Set by the elastic agent in the trainer's environment; all optional when run bare."""

    control_dir: Path | None = None
    """EDL_CONTROL_DIR: the agent asks for a drain here and reads timings back."""
    state_dir: Path | None = None
    """EDL_STATE_DIR: this member's local copy of the training state."""
    ledger_dir: Path | None = None
    """EDL_SAMPLE_LEDGER: test mode, record every sample id trained."""
    step_gate: Path | None = None
    """EDL_STEP_GATE: test mode, the file that says how many global steps the job may take
    (`agent.trainer.step_gate`); a gate passed to `ElasticTrainer.steps` wins."""
    member: str = "local"
    """EDL_MEMBER: this agent's member id (names ledger files)."""
    checkpoint_seconds: float = 30.0
    """EDL_LOCAL_SAVE_SECONDS (formerly EDL_CHECKPOINT_SECONDS): also save the local copy
    this often (bounds loss on a hang; durable checkpoints are `agent.trainer.checkpointer`)."""
    master_wait_seconds: float = 120.0
    """EDL_MASTER_WAIT_SECONDS: how long the ranks of a generation wait for each other
    (`agent.trainer.rendezvous`) before giving up on it."""
    reinit: str = "auto"
    """EDL_REINIT: ``auto`` (in-process when the self-test passes) or ``process`` (always
    restart the trainer process on a rescale)."""
    reinit_wait_seconds: float = 60.0
    """EDL_REINIT_WAIT_SECONDS: how long a drained in-process trainer waits for its next world."""
    reinit_limit: int = 50
    """EDL_REINIT_LIMIT: in-process generations per trainer process; after that it takes the
    process path once (bounds what a framework keeps per group: Paddle's comm contexts)."""
    store_ports: range | None = None
    """EDL_STORE_PORTS (``LOW-HIGH``): the ports rank 0's store of a generation may take
    (a firewall's opening); unset: any port the kernel finds free on every address."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ElasticTrainerSettings:
        """Reads the ``EDL_*`` variables; raises `ConfigError` on a malformed one."""
        raw_limit = (env.get(names.REINIT_LIMIT) or "").strip()
        try:
            limit = int(raw_limit) if raw_limit else cls.reinit_limit
        except ValueError as e:
            raise ConfigError(f"{names.REINIT_LIMIT}={raw_limit!r} is not an integer") from e
        return cls(
            control_dir=_path(env, names.CONTROL_DIR),
            state_dir=_path(env, names.STATE_DIR),
            ledger_dir=_path(env, names.SAMPLE_LEDGER),
            step_gate=_path(env, names.STEP_GATE),
            member=env.get(names.MEMBER, "local") or "local",
            checkpoint_seconds=_number(
                env, names.LOCAL_SAVE_SECONDS, cls.checkpoint_seconds, names.LOCAL_SAVE_SECONDS_OLD
            ),
            master_wait_seconds=_number(env, names.MASTER_WAIT, cls.master_wait_seconds),
            reinit=(env.get(names.REINIT) or cls.reinit).strip().lower(),
            reinit_wait_seconds=_number(env, names.REINIT_WAIT, cls.reinit_wait_seconds),
            reinit_limit=limit,
            store_ports=_store_ports(env.get(names.STORE_PORTS, "")),
        )


def _store_ports(raw: str) -> range | None:
    if not raw.strip():
        return None
    try:
        return parse_port_range(raw)
    except ValueError as e:
        raise ConfigError(f"{names.STORE_PORTS}={e}") from None
