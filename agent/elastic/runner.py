"""`edl-agent run --elastic`: composes membership, the trainer supervisor and the exporter.

Kept apart from `agent.cli` so the CLI only has to parse `--elastic ...` and hand over; every
collaborator is built here from `ElasticOptions` and passed in, nothing is global.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import secrets
import signal
import socket
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.app import create_registry
from agent.checkpoints import settings as checkpoint_flags
from agent.checkpoints.catalogue import Checkpoints, finished_at
from agent.checkpoints.settings import CheckpointSettings
from agent.collectors.gpu import open_nvml
from agent.config import AgentSettings
from agent.elastic.errors import ElasticError
from agent.elastic.local_store import LocalStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.store import MembershipStore
from agent.elastic.supervisor import (
    ON_FINISHED,
    ElasticSettings,
    ElasticSupervisor,
    control_env,
)
from agent.elastic.watchdog import StallWatchdog
from agent.elastic.world import Member
from agent.errors import ConfigError
from agent.exporter import MetricsServer
from agent.protocol import env as names
from agent.protocol.world import TrainerWorld
from agent.readiness import Readiness
from agent.reports import prepare_metrics_dir
from agent.rescales import RescaleLog
from agent.supervisor import TrainerSupervisor
from agent.trainer import frameworks

log = logging.getLogger(__name__)

DEFAULT_PORTS = (29543, 29544)
"""Below Linux's default ephemeral range (32768-60999): no port bound to 0 (a gloo pair, a
generation's store) can be holding one when this member's trainer needs it."""
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


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
    on_finished: str = "idle"
    """--on-finished / EDL_ON_FINISHED: once the job is finished, ``idle`` until SIGTERM (a
    Deployment) or ``exit`` 0 (a Job, a local run)."""
    checkpoints: CheckpointSettings = field(default_factory=CheckpointSettings)
    """--checkpoint-* / EDL_CHECKPOINT_*: durable checkpoints (`agent.checkpoints`)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The elastic flags of `edl-agent run`."""
    group = parser.add_argument_group("elastic training")
    group.add_argument("--elastic", action="store_true", help="join an elastic job")
    group.add_argument("--job", help="job name (EDL_JOB)")
    group.add_argument("--membership", help="local:/dir or kubernetes (EDL_MEMBERSHIP)")
    group.add_argument("--min", dest="min_world", help="smallest world (EDL_MIN_WORLD, 1)")
    group.add_argument("--max", dest="max_world", help="largest world (EDL_MAX_WORLD, 64)")
    group.add_argument(
        "--on-finished",
        help="once the job is finished: idle until SIGTERM, or exit 0 (EDL_ON_FINISHED, idle)",
    )
    checkpoint_flags.add_arguments(parser)


ELASTIC_FLAGS = (
    "elastic",
    "job",
    "membership",
    "min_world",
    "max_world",
    "on_finished",
    *checkpoint_flags.FLAGS,
)


def free_static_port(rng: random.Random | None = None, attempts: int = 200) -> int:
    """A free port *below* the ephemeral range, for ``EDL_TRAINER_PORTS=auto``.

    A port bound to 0 comes from the ephemeral range, so one chosen below it cannot be taken
    later by a gloo pair or a generation's store while it is not listening (between
    generations, or while another member is rank 0); one chosen by binding port 0 could.
    """
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = rng or random.Random()
    for _ in range(attempts):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ConfigError(f"no free port below the ephemeral range ({low}) after {attempts} tries")


def options_from(flags: Mapping[str, object], env: Mapping[str, str]) -> ElasticOptions | None:
    """`ElasticOptions` from parsed flags and the environment; None without ``--elastic``."""
    if not flags.get("elastic"):
        return None

    def pick(flag: str, var: str, default: str = "") -> str:
        value = flags.get(flag)
        return str(value) if value not in (None, "") else env.get(var, default).strip()

    job = pick("job", "EDL_JOB")
    membership = pick("membership", "EDL_MEMBERSHIP")
    if not job or not membership:
        raise ConfigError("--elastic needs --job NAME and --membership local:/dir|kubernetes")
    if not (membership.startswith("local:") or membership == "kubernetes"):
        raise ConfigError(f"--membership {membership!r}: expected local:/dir or kubernetes")
    on_finished = pick("on_finished", "EDL_ON_FINISHED", "idle")
    if on_finished not in ON_FINISHED:
        raise ConfigError(f"--on-finished {on_finished!r}: expected idle or exit")
    try:
        min_size = int(pick("min_world", "EDL_MIN_WORLD", "1"))
        max_size = int(pick("max_world", "EDL_MAX_WORLD", "64"))
        raw_ports = env.get("EDL_TRAINER_PORTS", "").strip()
        if raw_ports == "auto" or (not raw_ports and membership.startswith("local:")):
            ports = (free_static_port(), free_static_port())  # one network namespace
            while ports[1] == ports[0]:
                ports = (ports[0], free_static_port())
        elif raw_ports:
            a, b = (int(p) for p in raw_ports.split(","))
            ports = (a, b)
        else:
            ports = DEFAULT_PORTS
    except ValueError as e:
        raise ConfigError(f"elastic option: {e}") from e
    member_id = (
        env.get("EDL_MEMBER_ID") or env.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    )
    work = env.get("EDL_ELASTIC_DIR", "").strip()
    return ElasticOptions(
        job=job,
        membership=membership,
        min_size=min_size,
        max_size=max_size,
        member_id=member_id,
        host=env.get("EDL_ADVERTISE_HOST") or env.get("POD_IP") or "127.0.0.1",
        ports=ports,
        work_dir=Path(work) if work else Path(tempfile.mkdtemp(prefix=f"edl-{job}-")),
        on_finished=on_finished,
        checkpoints=CheckpointSettings.from_env(env, flags),
    )


def elastic_options(
    parser: argparse.ArgumentParser, argv: Sequence[str], env: Mapping[str, str]
) -> ElasticOptions | None:
    """Parses the `edl-agent` arguments before ``--`` for the elastic flags."""
    args = list(argv)
    head = args[: args.index("--")] if "--" in args else args
    return options_from(vars(parser.parse_args(head)), env)


def build_store(options: ElasticOptions, env: Mapping[str, str]) -> MembershipStore:
    """The membership backend named by ``--membership``."""
    if options.membership.startswith("local:"):
        return LocalStore.create(Path(options.membership[len("local:") :]) / options.job)
    from agent.elastic.kubernetes_store import KubernetesStore  # the client is heavy

    return KubernetesStore.from_environment(options.job, env)


class JobFinishedCollector(Collector):
    """`edl_trainer_job_finished`: 1 once the agent knows the job is done (it then idles)."""

    def __init__(self, elastic: ElasticSupervisor) -> None:
        self._elastic = elastic

    def collect(self) -> Iterable[Metric]:
        """Yields the one gauge."""
        yield GaugeMetricFamily(
            "edl_trainer_job_finished",
            "1 once the elastic job is finished (no trainer is started any more).",
            1 if self._elastic.job_finished else 0,
        )


def readiness_of(elastic: ElasticSupervisor, trainer: TrainerSupervisor, job: str) -> Readiness:
    """Ready while a trainer runs, and when the job is finished (the pod idles by design)."""
    if elastic.job_finished:
        step = elastic.finished_at_step
        return Readiness(
            True, f"job {job} finished at step {'?' if step is None else step}; idling"
        )
    return trainer.readiness()


def run_elastic(
    options: ElasticOptions,
    settings: AgentSettings,
    command: Sequence[str],
    env: Mapping[str, str],
    metrics_dir: Path,
) -> int:
    """Runs this member until the job ends or it leaves; returns the process exit status."""
    me = Member(
        joined=time.time(),
        id=options.member_id,
        incarnation=secrets.token_hex(4),
        host=options.host,
        ports=options.ports,
    )
    membership_settings = MembershipSettings.from_env(
        min_size=options.min_size, max_size=options.max_size
    )
    membership = Membership(build_store(options, env), me, membership_settings)
    control_dir, state_dir = options.work_dir / "control", options.work_dir / "state"
    trainer_env = {**env, **control_env(control_dir, state_dir, me.id), names.JOB: options.job}
    checkpoints = None
    if options.checkpoints.enabled:
        store = options.checkpoints.store(options.job)
        store.probe()  # an unusable volume stops the agent now, in one line
        checkpoints = Checkpoints(store)
        trainer_env.update(options.checkpoints.to_env())
    explicit = settings.framework != frameworks.AUTO
    if explicit:  # else the warm trainer reports the framework it imported
        trainer_env[names.FRAMEWORK] = settings.framework
    trainer = TrainerSupervisor(
        command,
        prepare_metrics_dir(metrics_dir),
        TrainerWorld(),
        trainer_env,
        flush_seconds=settings.flush_seconds,
        stop_grace_seconds=settings.stop_grace_seconds,
        framework=frameworks.get(settings.framework if explicit else "paddle"),
    )
    rescales = RescaleLog()
    elastic_settings = ElasticSettings.from_env({**env, "EDL_ON_FINISHED": options.on_finished})
    try:
        watchdog = StallWatchdog(elastic_settings.stall_timeout, settings.flush_seconds)
    except ValueError as e:
        raise ConfigError(f"EDL_STALL_TIMEOUT: {e}") from e
    elastic = ElasticSupervisor(
        membership,
        trainer,
        control_dir,
        rescales,
        elastic_settings,
        job=options.job,
        watchdog=watchdog,
        finished_elsewhere=(lambda: finished_at(checkpoints)) if checkpoints else None,
    )
    nvml, nvml_note = open_nvml()
    registry = create_registry(metrics_dir, trainer, nvml, rescales)
    registry.register(JobFinishedCollector(elastic))
    server = MetricsServer(
        registry,
        lambda: readiness_of(elastic, trainer, options.job),
        settings.host,
        settings.port,
    )
    server.start()
    previous = {s: signal.signal(s, elastic.request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    log.info(
        "member %s of job %s (%s, world %d..%d, framework %s); /metrics on port %d; %s; %s",
        me.key,
        options.job,
        options.membership,
        options.min_size,
        options.max_size,
        settings.framework,
        server.port,
        nvml_note,
        f"checkpoints in {checkpoints.store.url}" if checkpoints else "no durable checkpoints",
    )
    try:
        return elastic.run()
    except ElasticError as e:
        log.error("%s", e)
        membership.leave()
        trainer.stop(grace_seconds=5.0)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.close()
