"""The supervisor with real child processes: env, exit status, signals, restarts."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from agent.errors import TrainerStartError
from agent.process.trainer_supervisor import TrainerState, TrainerSupervisor
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from tests.support.waiting import wait_for

PY = sys.executable


def supervisor(tmp_path: Path, code: str, world: TrainerWorld | None = None) -> TrainerSupervisor:
    return TrainerSupervisor(
        [PY, "-c", code],
        tmp_path,
        world or TrainerWorld(rank=1, world_size=2, generation=7),
        {"PATH": os.environ.get("PATH", ""), "KEEP": "me"},
        flush_seconds=0.5,
        stop_grace_seconds=5,
    )


@pytest.mark.slow
def test_the_trainer_gets_the_world_and_metrics_env(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    sup = supervisor(
        tmp_path, f"import json,os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    )
    assert sup.readiness().reason == "trainer not started"
    sup.start()
    ended = sup.wait(20)
    assert ended is not None and ended.status == 0
    env = json.loads(out.read_text())
    assert env["PADDLE_TRAINER_ID"] == "1"
    assert env["PADDLE_TRAINERS_NUM"] == "2"
    assert env["EDL_GENERATION"] == "7"
    assert env["EDL_METRICS_DIR"] == str(tmp_path)
    assert env["EDL_TRAINER_INCARNATION"] == "1"
    assert env["EDL_METRICS_FLUSH_SECONDS"] == "0.5"
    assert env["KEEP"] == "me"


@pytest.mark.slow
def test_a_torch_trainer_gets_the_world_in_torchs_variables(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    world = TrainerWorld(rank=1, world_size=2, generation=7, master="127.0.0.1:29500")
    sup = supervisor(
        tmp_path, f"import json,os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))", world
    )
    sup.framework = frameworks.get("torch")
    sup.start()
    ended = sup.wait(20)
    assert ended is not None and ended.status == 0
    env = json.loads(out.read_text())
    assert (env["RANK"], env["WORLD_SIZE"], env["EDL_GENERATION"]) == ("1", "2", "7")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29500")
    assert not [k for k in env if k.startswith("PADDLE_")]


@pytest.mark.slow
def test_a_crashing_trainer_is_reported_with_its_status(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, "raise SystemExit(3)")
    sup.start()
    ended = sup.wait(20)
    assert ended is not None and ended.status == 3
    assert sup.state is TrainerState.EXITED and sup.pid is None
    verdict = sup.readiness()
    assert not verdict.ready
    assert "exited with status 3" in verdict.reason


@pytest.mark.slow
def test_a_missing_command_fails_to_start(tmp_path: Path) -> None:
    sup = TrainerSupervisor(["/no/such/trainer"], tmp_path, TrainerWorld(), {})
    with pytest.raises(TrainerStartError, match="cannot execute '/no/such/trainer'"):
        sup.start()
    assert sup.state is TrainerState.START_FAILED
    assert "failed to start" in sup.readiness().reason


@pytest.mark.slow
def test_sigterm_reaches_the_trainer_and_its_status_is_128_plus_15(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, "import time; time.sleep(60)")
    sup.start()
    assert sup.readiness().ready
    sup.forward_signal(signal.SIGTERM)
    ended = sup.wait(20)
    assert ended is not None and ended.status == 128 + signal.SIGTERM
    assert "killed by SIGTERM" in ended.describe()


@pytest.mark.slow
def test_stop_kills_a_trainer_that_ignores_sigterm(tmp_path: Path) -> None:
    armed = tmp_path / "ignoring-sigterm"
    code = (
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(armed)!r}, 'w').close(); time.sleep(60)"
    )
    sup = supervisor(tmp_path, code)
    sup.start()
    wait_for(armed.exists, timeout_s=60, what="the trainer's SIGTERM handler installed")
    ended = sup.stop(grace_seconds=0.5)
    assert ended is not None and ended.status == 128 + signal.SIGKILL


@pytest.mark.slow
def test_restart_starts_a_new_incarnation_in_the_new_world(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, "import time; time.sleep(60)")
    sup.start()
    bigger = TrainerWorld(rank=2, world_size=3, generation=8)
    sup.restart(bigger)
    assert sup.world == bigger
    assert sup.starts == 2
    assert "incarnation 2" in sup.readiness().reason
    with pytest.raises(TrainerStartError, match="already running"):
        sup.start()
    sup.stop(grace_seconds=5)
    assert sup.pid is None


@pytest.mark.slow
def test_incarnations_continue_after_reports_left_by_an_earlier_agent(tmp_path: Path) -> None:
    (tmp_path / "trainer-000005.json").write_text("{}")
    sup = supervisor(tmp_path, "pass")
    sup.start()
    sup.wait(20)
    assert "incarnation 6" in sup.readiness().reason
