from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.errors import ConfigError, MetricsDirError
from agent.trainer.reports import read_reports
from agent.trainer.session import start_session
from tests.support.waiting import wait_for


def test_under_the_agent_the_session_reports_to_its_incarnation_file(tmp_path: Path) -> None:
    env = {
        "EDL_METRICS_DIR": str(tmp_path),
        "EDL_TRAINER_INCARNATION": "4",
        "EDL_METRICS_FLUSH_SECONDS": "60",
        "PADDLE_TRAINER_ID": "1",
        "PADDLE_TRAINERS_NUM": "2",
        "EDL_GENERATION": "3",
    }
    session = start_session(env)
    assert (session.rank, session.world_size, session.generation) == (1, 2, 3)
    first = json.loads((tmp_path / "trainer-000004.json").read_text())
    assert first["counters"]["steps"] == 0  # written at start, before any step
    session.recorder.record_step(32, 0.01)
    session.recorder.record_comm(0.002, 400)
    session.close()
    (r,) = read_reports(tmp_path).reports
    assert (r.incarnation, r.rank, r.world_size, r.generation) == (4, 1, 2, 3)
    assert (r.counters.steps, r.counters.samples, r.counters.comm_bytes) == (1, 32, 400)


def test_the_background_flusher_writes_without_being_asked(tmp_path: Path) -> None:
    env = {"EDL_METRICS_DIR": str(tmp_path), "EDL_TRAINER_INCARNATION": "1"}
    env["EDL_METRICS_FLUSH_SECONDS"] = "0.05"
    with start_session(env) as session:
        session.recorder.record_step(5, 0.01)

        def flushed() -> bool:
            reports = read_reports(tmp_path).reports
            return bool(reports) and reports[0].counters.steps == 1

        wait_for(flushed, timeout_s=60, what="the flusher to write the step", interval_s=0.05)


def test_without_an_agent_the_session_records_in_memory_only(tmp_path: Path) -> None:
    session = start_session({})
    session.recorder.record_step(1, 0.1)
    session.close()
    assert session.recorder.steps == 1


def test_an_unwritable_metrics_dir_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(MetricsDirError, match="cannot write trainer metrics"):
        start_session({"EDL_METRICS_DIR": str(blocker / "m"), "EDL_TRAINER_INCARNATION": "1"})


def test_malformed_settings_are_refused() -> None:
    with pytest.raises(ConfigError):
        start_session({"EDL_METRICS_FLUSH_SECONDS": "soon"})
