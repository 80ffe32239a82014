from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.errors import MetricsDirError
from agent.trainer.recording import StepRecorder
from agent.trainer.reports import (
    TrainerReport,
    next_incarnation,
    prepare_metrics_dir,
    read_reports,
    report_path,
    write_report,
)


def report(incarnation: int, steps: int) -> TrainerReport:
    rec = StepRecorder(wall=lambda: 50.0)
    for _ in range(steps):
        rec.record_step(10, 0.01)
    rec.record_comm(0.5, 4096)
    return TrainerReport(incarnation, 1234, 1.0, 2.0, 0, 2, 5, rec.snapshot())


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    written = report(1, 3)
    write_report(report_path(tmp_path, 1), written)
    scan = read_reports(tmp_path)
    assert scan.errors == ()
    assert scan.reports == (written,)
    assert os.listdir(tmp_path) == ["trainer-000001.json"]  # no temporary file left behind


def test_a_corrupt_report_is_skipped_and_named(tmp_path: Path) -> None:
    write_report(report_path(tmp_path, 1), report(1, 3))
    (tmp_path / "trainer-000002.json").write_text("{not json")
    (tmp_path / "unrelated.txt").write_text("ignored")
    scan = read_reports(tmp_path)
    assert [r.incarnation for r in scan.reports] == [1]
    assert len(scan.errors) == 1 and "trainer-000002.json" in scan.errors[0]


def test_next_incarnation_continues_after_existing_reports(tmp_path: Path) -> None:
    assert next_incarnation(tmp_path) == 1
    write_report(report_path(tmp_path, 7), report(7, 1))
    assert next_incarnation(tmp_path) == 8


def test_prepare_creates_a_missing_directory(tmp_path: Path) -> None:
    assert prepare_metrics_dir(tmp_path / "a" / "b").is_dir()


def test_prepare_refuses_a_path_that_is_not_a_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(MetricsDirError, match="not usable"):
        prepare_metrics_dir(blocker / "metrics")


def test_reading_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(MetricsDirError):
        read_reports(tmp_path / "missing")
