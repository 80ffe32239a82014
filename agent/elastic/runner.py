"""`edl-agent run --elastic`: composes membership, the trainer supervisor and the exporter.

Kept apart from `agent.process.cli` so the CLI only has to parse `--elastic ...` and hand over;
every collaborator is built here from `ElasticOptions` and passed in, nothing is global.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agent.checkpoints import settings as checkpoint_settings
from agent.checkpoints.settings import CheckpointSettings
from agent.elastic.failures import FailurePolicy
from agent.elastic.finished_job import DeploymentRetirement
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.option_table import ELASTIC_OPTIONS, LIVENESS
from agent.elastic.options import ElasticOptions
from agent.elastic.store import MembershipStore
from agent.elastic.supervisor import (
    ElasticSettings,
    ElasticSupervisor,
    backend_of,
    control_env,
    start_warm,
)
from agent.elastic.watchdog import StallWatchdog
from agent.elastic.world import Member
from agent.errors import ConfigError
from agent.process.log_tail import StderrTail
from agent.process.readiness import Readiness
from agent.process.rescales import RescaleLog
from agent.process.settings import AgentSettings
from agent.process.temp_dirs import temporary_dir
from agent.process.trainer_supervisor import TrainerSupervisor
from agent.protocol import env as names
from agent.protocol.errors import ElasticError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.reports import prepare_metrics_dir
from edl_common import ports as port_choice
from edl_common.options import add_arguments as add_option_arguments
from edl_common.options import read

log = logging.getLogger(__name__)

DEFAULT_PORTS = (29543, 29544)
"""Below Linux's default ephemeral range (32768-60999): no port bound to 0 (a gloo pair, a
generation's store) can be holding one when this member's trainer needs it."""
_T = TypeVar("_T")


ELASTIC_TABLE = (*ELASTIC_OPTIONS, *checkpoint_settings.OPTIONS)
"""Every row of `edl-agent run --elastic` beyond the plain agent's."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The elastic flags of `edl-agent run`."""
    add_option_arguments(parser, ELASTIC_TABLE)


def free_static_port(rng: random.Random | None = None, attempts: int = 200) -> int:
    """A port free on every address, *below* the ephemeral range, for ``EDL_TRAINER_PORTS=auto``.

    A port bound to 0 comes from the ephemeral range, so one chosen below it cannot be taken
    later by a gloo pair or a generation's store while it is not listening (between
    generations, or while another member is rank 0); one chosen by binding port 0 could.
    Members take the band's upper half (`edl_common.ports.Band.MEMBER`), test servers the
    lower one.
    """
    try:
        return port_choice.free_static_port(port_choice.Band.MEMBER, rng, attempts)
    except port_choice.NoFreePort as e:
        raise ConfigError(f"EDL_TRAINER_PORTS=auto: {e}") from e


def options_from(flags: Mapping[str, object], env: Mapping[str, str]) -> ElasticOptions | None:
    """`ElasticOptions` from parsed flags and the environment; None without ``--elastic``.

    Raises:
        ConfigError: one line naming the flag or variable that is wrong.
    """
    values = read(ELASTIC_OPTIONS, flags, env)
    if not values["elastic"]:
        return None
    job, membership = values["job"], values["membership"]
    if not job or not membership:
        raise ConfigError("--elastic needs --job NAME and --membership local:/dir|kubernetes")
    if not (membership.startswith("local:") or membership == "kubernetes"):
        raise ConfigError(f"--membership {membership!r}: expected local:/dir or kubernetes")
    ports = _trainer_ports(values["trainer_ports"], membership)
    _check_store_ports(env)
    member_id = (
        values["member_id"] or env.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    )
    work = values["elastic_dir"]
    deployment = values["deployment"] or ""
    if values["on_finished"] == "scale-to-zero" and (membership != "kubernetes" or not deployment):
        raise ConfigError(
            "--on-finished scale-to-zero needs --membership kubernetes and --deployment NAME "
            "(EDL_DEPLOYMENT)"
        )
    return ElasticOptions(
        job=job,
        membership=membership,
        min_size=values["min_world"],
        max_size=values["max_world"],
        member_id=member_id,
        host=values["advertise_host"] or env.get("POD_IP") or "127.0.0.1",
        ports=ports,
        work_dir=work
        or temporary_dir(f"edl-{job}-", "the member's state folder", "EDL_ELASTIC_DIR"),
        on_finished=values["on_finished"],
        deployment=deployment,
        checkpoints=CheckpointSettings.from_env(env, flags),
        membership_settings=_checked(
            MembershipSettings,
            min_size=values["min_world"],
            max_size=values["max_world"],
            **_liveness(values, env, membership),
            debounce=values["debounce"],
            max_debounce=values["max_debounce"],
            poll_interval=values["poll_interval"],
        ),
        timeouts=_checked(
            ElasticSettings,
            drain_timeout=values["drain_timeout"],
            init_timeout=values["init_timeout"],
            regroup_timeout=values["regroup_timeout"],
            max_resets=values["max_resets"],
            stall_timeout=values["stall_timeout"],
            backend=values["backend"] or "",
            on_finished=values["on_finished"],
            failures=FailurePolicy(values["failure_budget"], values["failure_window"]),
        ),
    )


def _liveness(
    values: Mapping[str, Any], env: Mapping[str, str], membership: str
) -> dict[str, float]:
    """The heartbeat interval and TTL: the backend's defaults where not set.

    A TTL set alone takes an interval of a third of it where the default would not fit twice
    in it (a job that set ``EDL_MEMBER_TTL=8s`` before the 5 s default still starts); an
    interval set alone takes a TTL of three of them where the default is shorter.
    """
    given = {
        "heartbeat_interval": bool(env.get("EDL_HEARTBEAT_INTERVAL", "").strip()),
        "ttl": bool(env.get("EDL_MEMBER_TTL", "").strip()),
    }
    chosen = {k: float(values[k]) for k in given}
    if membership.startswith("local:"):
        chosen.update({k: v for k, v in LIVENESS["local"].items() if not given[k]})
    if given["ttl"] and not given["heartbeat_interval"]:
        chosen["heartbeat_interval"] = min(chosen["heartbeat_interval"], chosen["ttl"] / 3)
    if given["heartbeat_interval"] and not given["ttl"]:
        chosen["ttl"] = max(chosen["ttl"], 3 * chosen["heartbeat_interval"])
    return chosen


def _check_store_ports(env: Mapping[str, str]) -> None:
    """A bad EDL_STORE_PORTS (the trainers inherit it) is the agent's one-line error at start.

    Not a traceback in every trainer.
    """
    raw = env.get(names.STORE_PORTS, "")
    if raw.strip():
        try:
            port_choice.parse_port_range(raw)
        except ValueError as e:
            raise ConfigError(f"{names.STORE_PORTS}={e}") from None


def _trainer_ports(raw: str | None, membership: str) -> tuple[int, int]:
    if raw == "auto" or (not raw and membership.startswith("local:")):
        ports = (free_static_port(), free_static_port())  # one network namespace
        while ports[1] == ports[0]:
            ports = (ports[0], free_static_port())
        return ports
    if not raw:
        return DEFAULT_PORTS
    try:
        a, b = (int(p) for p in raw.split(","))
    except ValueError:
        raise ConfigError(
            f"EDL_TRAINER_PORTS={raw!r}: expected two ports, comma separated, or auto"
        ) from None
    if not (0 < a < 65536 and 0 < b < 65536) or a == b:
        raise ConfigError(f"EDL_TRAINER_PORTS={raw!r}: expected two different ports 1-65535")
    return a, b


def _checked(cls: Callable[..., _T], **values: Any) -> _T:
    """`cls(**values)`, with a rule across fields broken as one `ConfigError` line."""
    if values.get("min_size", 1) > values.get("max_size", 1):
        raise ConfigError(
            f"--min {values['min_size']} is above --max {values['max_size']} (EDL_MIN_WORLD, "
            "EDL_MAX_WORLD)"
        )
    if "ttl" in values and values["ttl"] <= 2 * values["heartbeat_interval"]:
        raise ConfigError(
            f"EDL_MEMBER_TTL={values['ttl']:g}s must exceed two heartbeat intervals "
            f"(EDL_HEARTBEAT_INTERVAL={values['heartbeat_interval']:g}s)"
        )
    try:
        return cls(**values)
    except ValueError as e:
        raise ConfigError(f"elastic settings: {e}") from e


def elastic_options(
    parser: argparse.ArgumentParser, argv: Sequence[str], env: Mapping[str, str]
) -> ElasticOptions | None:
    """Parses the `edl-agent` arguments before ``--`` for the elastic flags."""
    args = list(argv)
    head = args[: args.index("--")] if "--" in args else args
    return options_from(vars(parser.parse_args(head)), env)


def build_retirement(
    options: ElasticOptions, env: Mapping[str, str]
) -> DeploymentRetirement | None:
    """For ``--on-finished scale-to-zero``: what scales the job's Deployment to 0."""
    if options.on_finished != "scale-to-zero":
        return None
    from agent.elastic.finished_job import ClientDeploymentApi
    from agent.elastic.kubernetes_store import job_namespace

    api = ClientDeploymentApi.connect(job_namespace(env))
    return DeploymentRetirement(api, options.deployment, options.job)


def build_store(options: ElasticOptions, env: Mapping[str, str]) -> MembershipStore:
    """The membership backend named by ``--membership``."""
    if options.membership.startswith("local:"):
        from agent.elastic.local_store import LocalStore

        return LocalStore.create(Path(options.membership[len("local:") :]) / options.job)
    from agent.elastic.kubernetes_store import KubernetesStore  # the client is heavy

    return KubernetesStore.from_environment(options.job, env)


def readiness_of(elastic: ElasticSupervisor, trainer: TrainerSupervisor, job: str) -> Readiness:
    """Ready while a trainer runs, and when the job is finished (the pod idles by design).

    Not before the agent has read the job's world: the warm trainer starts before that (its
    import runs beside the agent's start-up), and in a finished job it is sent away at once.
    A finished pod is ready once that trainer is gone: ready then means idle, no trainer.
    """
    if elastic.job_finished:
        step = elastic.finished_at_step
        done = f"job {job} finished at step {'?' if step is None else step}"
        if elastic.job_failed:
            done = f"job {job} failed (trainer failures over its budget)"
        pid = trainer.pid
        if pid is not None:
            return Readiness(False, f"{done}; the trainer (pid {pid}) is on its way out")
        return Readiness(True, f"{done}; idling")
    if not elastic.started:
        return Readiness(False, f"starting: the world of job {job} not read yet")
    return trainer.readiness()


def run_elastic(
    options: ElasticOptions,
    settings: AgentSettings,
    command: Sequence[str],
    env: Mapping[str, str],
    metrics_dir: Path,
) -> int:
    """Runs this member until the job ends or it leaves; returns the process exit status.

    The warm trainer is started first, before the agent's own start-up (the membership store,
    on Kubernetes with its client and a round trip; the checkpoint volume's probe; the exporter
    and its imports), which then runs while the trainer starts and imports its framework: a
    joiner's first step waits for the longer of the two, not their sum. Should that start-up
    fail, the trainer (which never joined a world) is killed.
    """
    me = Member(
        joined=time.time(),
        id=options.member_id,
        incarnation=secrets.token_hex(4),
        host=options.host,
        ports=options.ports,
    )
    control_dir, state_dir = options.work_dir / "control", options.work_dir / "state"
    trainer_env = {**env, **control_env(control_dir, state_dir, me.id), names.JOB: options.job}
    if options.checkpoints.enabled:
        trainer_env.update(options.checkpoints.to_env())
    explicit = settings.trainer.framework != frameworks.AUTO
    if explicit:  # else the warm trainer reports the framework it imported
        trainer_env[names.FRAMEWORK] = settings.trainer.framework
    trainer = TrainerSupervisor(
        command,
        prepare_metrics_dir(metrics_dir),
        TrainerWorld(),
        trainer_env,
        flush_seconds=settings.trainer.flush_seconds,
        stop_grace_seconds=settings.trainer.stop_grace_seconds,
        framework=frameworks.get(settings.trainer.framework if explicit else "paddle"),
        tail=StderrTail(sys.stderr.buffer),
    )
    start_warm(trainer, control_dir, backend_of(options.timeouts))
    try:
        membership = Membership(build_store(options, env), me, options.membership_settings)
    except BaseException:
        trainer.kill()
        raise
    try:
        return _run_member(options, settings, env, metrics_dir, me, membership, trainer)
    except BaseException:
        trainer.kill()  # a no-op once the trainer is gone
        raise
    finally:
        membership.close()


def _run_member(
    options: ElasticOptions,
    settings: AgentSettings,
    env: Mapping[str, str],
    metrics_dir: Path,
    me: Member,
    membership: Membership,
    trainer: TrainerSupervisor,
) -> int:
    """`run_elastic` once its warm trainer runs and the membership store is open."""
    from agent.checkpoints.catalogue import Checkpoints, finished_at
    from agent.collectors.gpu import open_nvml
    from agent.collectors.supervision import JobFinishedCollector
    from agent.process.app import create_registry
    from agent.process.exporter import MetricsServer

    checkpoints = None
    if options.checkpoints.enabled:
        store = options.checkpoints.store(options.job)
        store.probe()  # an unusable volume stops the agent now, in one line
        checkpoints = Checkpoints(store)
    rescales = RescaleLog()
    elastic_settings = options.timeouts
    try:
        watchdog = StallWatchdog(elastic_settings.stall_timeout, settings.trainer.flush_seconds)
    except ValueError as e:
        raise ConfigError(f"EDL_STALL_TIMEOUT: {e}") from e
    retirement = build_retirement(options, env)
    elastic = ElasticSupervisor(
        membership,
        trainer,
        options.work_dir / "control",
        rescales,
        elastic_settings,
        job=options.job,
        watchdog=watchdog,
        finished_elsewhere=(lambda: finished_at(checkpoints)) if checkpoints else None,
        on_job_finished=retirement.retire if retirement else None,
        on_job_failed=retirement.fail if retirement else None,
        warm_started=True,
    )
    nvml, nvml_note = open_nvml()
    registry = create_registry(metrics_dir, trainer, nvml, rescales)
    registry.register(JobFinishedCollector(elastic))
    server = MetricsServer(
        registry,
        lambda: readiness_of(elastic, trainer, options.job),
        settings.exporter.host,
        settings.exporter.port,
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
        settings.trainer.framework,
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
