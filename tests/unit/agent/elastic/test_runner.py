from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry

from agent.collectors.supervision import JobFinishedCollector
from agent.elastic import runner
from agent.elastic.runner import (
    DEFAULT_PORTS,
    elastic_options,
    options_from,
    readiness_of,
)
from agent.elastic.store import MembershipStore
from agent.elastic.supervisor import start_warm
from agent.errors import ConfigError
from agent.process.cli import build_parser, parse_args
from agent.process.readiness import Readiness
from agent.process.trainer_supervisor import TrainerSupervisor
from edl_common.ports import EPHEMERAL_RANGE, Band, static_band

BASE = {"elastic": True, "job": "digits", "membership": "kubernetes"}


def test_no_elastic_flag_means_no_options() -> None:
    assert options_from({"elastic": False}, {}) is None


def test_flags_then_environment() -> None:
    env = {"POD_NAME": "trainer-x", "POD_IP": "10.1.2.3", "EDL_MAX_WORLD": "6"}
    opts = options_from({**BASE, "min_world": "2"}, env)
    assert opts is not None
    assert (opts.member_id, opts.host, opts.min_size, opts.max_size) == (
        "trainer-x",
        "10.1.2.3",
        2,
        6,
    )
    assert opts.ports == DEFAULT_PORTS


def test_ports_auto_and_explicit() -> None:
    auto = options_from(BASE, {"EDL_TRAINER_PORTS": "auto"})
    assert auto is not None and auto.ports != DEFAULT_PORTS and auto.ports[0] != auto.ports[1]
    low = int(EPHEMERAL_RANGE.read_text().split()[0])
    # below the ephemeral range: no port bound to 0 (gloo's, a store's) can ever hold them;
    # and in the members' band, which test servers never take
    assert all(1024 <= p < low for p in (*auto.ports, *DEFAULT_PORTS))
    assert all(p in static_band(Band.MEMBER) for p in (*auto.ports, *DEFAULT_PORTS))
    fixed = options_from(BASE, {"EDL_TRAINER_PORTS": "7000,7001"})
    assert fixed is not None and fixed.ports == (7000, 7001)


@pytest.mark.parametrize(
    ("membership", "env", "interval", "ttl"),
    [
        ("kubernetes", {}, 5.0, 15.0),  # a Lease write and a watch event per renewal: 5 s
        ("local:/tmp/m", {}, 1.0, 10.0),  # a file: fast detection costs nothing
        ("kubernetes", {"EDL_MEMBER_TTL": "8s"}, 8 / 3, 8.0),  # set before 5 s was the default
        ("kubernetes", {"EDL_MEMBER_TTL": "60s"}, 5.0, 60.0),
        ("local:/tmp/m", {"EDL_MEMBER_TTL": "2s"}, 2 / 3, 2.0),
        ("kubernetes", {"EDL_HEARTBEAT_INTERVAL": "10s"}, 10.0, 30.0),
        ("local:/tmp/m", {"EDL_HEARTBEAT_INTERVAL": "2s"}, 2.0, 10.0),
        ("kubernetes", {"EDL_HEARTBEAT_INTERVAL": "1s", "EDL_MEMBER_TTL": "10s"}, 1.0, 10.0),
    ],
)
def test_liveness_defaults_follow_the_backend_and_what_was_set(
    membership: str, env: dict[str, str], interval: float, ttl: float
) -> None:
    opts = options_from({**BASE, "membership": membership}, env)
    assert opts is not None
    settings = opts.membership_settings
    assert settings.heartbeat_interval == pytest.approx(interval)
    assert settings.ttl == pytest.approx(ttl)


def test_a_ttl_within_two_set_intervals_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^EDL_MEMBER_TTL=8s must exceed two heartbeat"):
        options_from(BASE, {"EDL_HEARTBEAT_INTERVAL": "5s", "EDL_MEMBER_TTL": "8s"})


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        ({"elastic": True}, {}),
        ({**BASE, "membership": "etcd://x"}, {}),
        ({**BASE, "min_world": "many"}, {}),
        (BASE, {"EDL_TRAINER_PORTS": "1"}),
        (BASE, {"EDL_STORE_PORTS": "25000-24000"}),
    ],
)
def test_bad_options_are_one_line_config_errors(
    flags: dict[str, object], env: dict[str, str]
) -> None:
    with pytest.raises(ConfigError):
        options_from(flags, env)


def test_cli_parses_elastic_flags_apart_from_agent_settings() -> None:
    argv = ["run", "--port", "0", "--elastic", "--job", "j", "--membership", "local:/tmp/x",
            "--min", "1", "--max", "3", "--", "python", "train.py"]  # fmt: skip
    settings, command = parse_args(argv, {})
    assert settings.exporter.port == 0 and command == ("python", "train.py")
    opts = elastic_options(build_parser(elastic=True), argv, {})
    assert opts is not None and (opts.job, opts.max_size) == ("j", 3)
    assert elastic_options(build_parser(elastic=True), ["run", "--", "python"], {}) is None


def test_on_finished_defaults_to_idle_and_takes_flag_then_environment() -> None:
    opts = options_from(BASE, {})
    assert opts is not None and opts.on_finished == "idle"
    opts = options_from(BASE, {"EDL_ON_FINISHED": "exit"})
    assert opts is not None and opts.on_finished == "exit"
    opts = options_from({**BASE, "on_finished": "idle"}, {"EDL_ON_FINISHED": "exit"})
    assert opts is not None and opts.on_finished == "idle"
    with pytest.raises(ConfigError, match="on-finished"):
        options_from({**BASE, "on_finished": "restart"}, {})
    argv = ["run", "--elastic", "--job", "j", "--membership", "kubernetes",
            "--on-finished", "exit", "--", "python", "train.py"]  # fmt: skip
    assert parse_args(argv, {})[1] == ("python", "train.py")
    opts = elastic_options(build_parser(elastic=True), argv, {})
    assert opts is not None and opts.on_finished == "exit"


class _Done:
    def __init__(self, finished: bool, started: bool = True) -> None:
        self.job_finished = finished
        self.job_failed = False
        self.finished_at_step = 184 if finished else None
        self.started = started


class _Trainer:
    pid = None

    def readiness(self) -> Readiness:
        return Readiness(False, "trainer not started")


class _Running:
    pid = 1

    def readiness(self) -> Readiness:
        return Readiness(True, "trainer running (pid 1)")


def test_a_warm_trainer_is_not_ready_before_the_world_is_read() -> None:
    # A late pod of a finished job starts its warm trainer before it reads the store: until
    # then its running trainer says nothing (it is sent away once the finish is read).
    early = readiness_of(_Done(False, started=False), _Running(), "digits")  # type: ignore[arg-type]
    assert early == Readiness(False, "starting: the world of job digits not read yet")
    later = readiness_of(_Done(False), _Running(), "digits")  # type: ignore[arg-type]
    assert later == Readiness(True, "trainer running (pid 1)")


@pytest.mark.parametrize("finished", [False, True])
def test_a_finished_job_is_ready_and_exported(finished: bool) -> None:
    done = _Done(finished)
    verdict = readiness_of(done, _Trainer(), "digits")  # type: ignore[arg-type]
    if finished:
        assert verdict == Readiness(True, "job digits finished at step 184; idling")
    else:
        assert verdict == Readiness(False, "trainer not started")
    registry = CollectorRegistry()
    registry.register(JobFinishedCollector(done))
    assert registry.get_sample_value("edl_trainer_job_finished") == (1.0 if finished else 0.0)


def test_a_failed_job_says_so_on_readyz_and_idles_ready() -> None:
    failed = _Done(True)
    failed.job_failed = True
    verdict = readiness_of(failed, _Trainer(), "digits")  # type: ignore[arg-type]
    assert verdict == Readiness(
        True, "job digits failed (trainer failures over its budget); idling"
    )


def test_a_finished_pod_is_not_ready_while_its_warm_trainer_is_on_its_way_out() -> None:
    # A late pod of a finished job sends its warm trainer away: ready (idle) only once it is
    # gone, so a ready finished pod runs no trainer.
    done = _Done(True)
    verdict = readiness_of(done, _Running(), "digits")  # type: ignore[arg-type]
    assert verdict == Readiness(
        False, "job digits finished at step 184; the trainer (pid 1) is on its way out"
    )
    registry = CollectorRegistry()
    registry.register(JobFinishedCollector(done))
    assert registry.get_sample_value("edl_trainer_job_finished") == 1.0


@pytest.mark.slow
def test_the_warm_trainer_starts_before_the_store_and_dies_when_the_start_up_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trainer's import is a joiner's longest wait: it starts before the agent's own
    # start-up (the store, on Kubernetes its client), and a start-up that fails kills it.
    started: list[TrainerSupervisor] = []

    def spy(trainer: TrainerSupervisor, control_dir: Path, backend: str) -> None:
        start_warm(trainer, control_dir, backend)
        started.append(trainer)

    def unreachable(options: object, env: object) -> MembershipStore:
        assert len(started) == 1 and started[0].pid is not None  # running meanwhile
        raise ConfigError("no membership store here")

    monkeypatch.setattr(runner, "start_warm", spy)
    monkeypatch.setattr(runner, "build_store", unreachable)
    argv = ["run", "--elastic", "--job", "digits", "--membership", f"local:{tmp_path}/store",
            "--", sys.executable, "-c", "import time; time.sleep(120)"]  # fmt: skip
    env = {"EDL_ELASTIC_DIR": str(tmp_path / "member")}
    settings, command = parse_args(argv, env)
    assert settings.elastic is not None
    with pytest.raises(ConfigError, match="no membership store here"):
        runner.run_elastic(settings.elastic, settings, command, env, tmp_path / "metrics")
    ended = started[0].wait(30)
    assert ended is not None and ended.status == 128 + signal.SIGKILL
