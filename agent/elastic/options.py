"""`ElasticOptions`: who one elastic member is and where its job's records live.

Apart from `agent.elastic.runner` so that `agent.process.settings` can name the type without
importing the runner (which reads `agent.process.settings`'s table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.checkpoints.settings import CheckpointSettings
from agent.elastic.membership import MembershipSettings
from agent.elastic.supervisor import ElasticSettings


@dataclass(frozen=True)
class ElasticOptions:
    """Who this member is and where the job's records live (flags, then ``EDL_*`` variables)."""

    job: str
    """--job / EDL_JOB: the job name; members of one job train together."""
    membership: str
    """--membership / EDL_MEMBERSHIP: ``local:/dir`` or ``kubernetes``."""
    min_size: int
    """--min / EDL_MIN_WORLD."""
    max_size: int
    """--max / EDL_MAX_WORLD."""
    member_id: str
    """EDL_MEMBER_ID, else POD_NAME, else host name + pid."""
    host: str
    """EDL_ADVERTISE_HOST, else POD_IP, else 127.0.0.1: where peers reach our trainer."""
    ports: tuple[int, int]
    """EDL_TRAINER_PORTS: two, comma separated, or ``auto`` (free ones; the default with local
    membership, needed when several members share one network namespace)."""
    work_dir: Path
    """EDL_ELASTIC_DIR: this member's control channel and local state copy."""
    on_finished: str
    """--on-finished / EDL_ON_FINISHED: once the job is finished, ``idle`` until SIGTERM (a
    Deployment), ``exit`` 0 (a Job, a local run) or ``scale-to-zero`` (idle, and scale
    `deployment` to 0). Its default is the table's (`agent.elastic.option_table`)."""
    deployment: str
    """--deployment / EDL_DEPLOYMENT: this job's Deployment (for ``scale-to-zero``; empty
    without one)."""
    checkpoints: CheckpointSettings = field(default_factory=CheckpointSettings)
    """--checkpoint-* / EDL_CHECKPOINT_*: durable checkpoints (`agent.checkpoints`)."""
    membership_settings: MembershipSettings = field(default_factory=MembershipSettings)
    """EDL_HEARTBEAT_INTERVAL, EDL_MEMBER_TTL, ...: how members agree on a world."""
    timeouts: ElasticSettings = field(default_factory=ElasticSettings)
    """EDL_DRAIN_TIMEOUT, EDL_INIT_TIMEOUT, ...: the bounds of the rescale phases."""
