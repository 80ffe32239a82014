"""The job's progress, ETA, global step and the script's scalars: recorded by the trainer,
reported through its report file, exported by the agent (`edl_job_*`, `edl_trainer_scalar`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.collectors.health import CollectorHealth
from agent.collectors.progress import EtaEstimator, ProgressPoint
from agent.trainer.recording import MAX_SCALARS, StepRecorder
from agent.trainer.reports import read_report, report_path
from agent.trainer.sampler import ElasticSampler
from tests.unit.agent.helpers import scrape
from tests.unit.agent.test_trainer_collector import incarnation, registry_for


def test_scalars_keep_their_last_value_and_stay_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    rec = StepRecorder()
    rec.scalar("loss", 2.5)
    rec.scalar("loss", 0.75)
    for n in range(MAX_SCALARS + 3):
        rec.scalar(f"s{n}", float(n))
    snap = rec.snapshot()
    assert len(snap.scalars) == MAX_SCALARS and ("loss", 0.75) in snap.scalars
    assert capsys.readouterr().err.count("ignored: at most 16 scalar names") == 1
    rec.scalar("loss", 0.5)  # a known name is always recorded
    assert ("loss", 0.5) in rec.snapshot().scalars
    with pytest.raises(ValueError, match="scalar name 'val loss'"):
        StepRecorder().scalar("val loss", 1.0)


def test_the_sampler_knows_the_share_of_its_planned_samples_trained() -> None:
    sampler = ElasticSampler(num_samples=100, global_batch=30, epochs=None)
    assert sampler.progress is None  # no end planned
    sampler.epochs = 2
    assert sampler.progress == 0.0
    for _ in range(5):  # 30, 30, 30, 10, then 30 of epoch 1
        plan = sampler.plan(0, 1)
        assert plan is not None
        sampler.advance(plan)
    assert sampler.progress == pytest.approx(130 / 200)


def test_eta_is_what_is_left_at_the_windows_rate() -> None:
    eta = EtaEstimator(window=95)
    assert eta.eta() is None
    eta.observe(ProgressPoint(100.0, 0.10))
    assert eta.eta() is None  # one point: no rate yet
    eta.observe(ProgressPoint(110.0, 0.20))  # 1 % per second
    assert eta.eta() == pytest.approx(80.0)
    eta.observe(ProgressPoint(110.0, 0.90))  # the same moment again: ignored
    eta.observe(ProgressPoint(200.0, 0.30))  # slower now; the first point is out of the window
    assert eta.eta() == pytest.approx(0.7 / (0.1 / 90))
    eta.observe(ProgressPoint(210.0, 0.05))  # restored from an older checkpoint: afresh
    assert eta.eta() is None
    eta.observe(ProgressPoint(220.0, 1.0))
    assert eta.eta() == 0.0


def test_the_agent_exports_progress_eta_step_and_scalars_of_the_newest_trainer(
    tmp_path: Path,
) -> None:
    registry = registry_for(tmp_path, CollectorHealth())
    assert not any(k.startswith(("edl_job_", "edl_trainer_scalar")) for k in scrape(registry))
    rec, flusher = incarnation(tmp_path, 1)
    rec.record_step(32, 0.1)
    rec.progress, rec.global_step = 0.25, 10
    rec.scalar("loss", 1.5)
    flusher.flush()
    first = scrape(registry)
    assert first["edl_job_progress_ratio"] == 0.25 and first["edl_job_global_step"] == 10
    assert first['edl_trainer_scalar{name="loss"}'] == 1.5
    assert "edl_job_eta_seconds" not in first  # one point
    # a restarted trainer: the newest incarnation's values win, once it has any
    _, flusher2 = incarnation(tmp_path, 2)
    path = report_path(tmp_path, 2)
    doc = json.loads(path.read_text())
    doc["counters"].update(progress=0.5, global_step=20, last_step_unix=doc["updated_unix"] + 25)
    doc["counters"]["scalars"] = [["loss", 0.5], ["accuracy", 0.9]]
    first_at = read_report(report_path(tmp_path, 1))
    assert first_at is not None and first_at.counters.last_step_unix is not None
    doc["counters"]["last_step_unix"] = first_at.counters.last_step_unix + 25
    path.write_text(json.dumps(doc))
    second = scrape(registry)
    assert second["edl_job_progress_ratio"] == 0.5 and second["edl_job_global_step"] == 20
    assert second['edl_trainer_scalar{name="accuracy"}'] == 0.9
    assert second["edl_job_eta_seconds"] == pytest.approx(50.0)  # 0.25 in 25 s, 0.5 left
    flusher.close()
    flusher2.close()


def test_an_older_report_without_the_new_fields_still_reads(tmp_path: Path) -> None:
    _, flusher = incarnation(tmp_path, 1)
    flusher.close()
    path = report_path(tmp_path, 1)
    doc = json.loads(path.read_text())
    for key in ("progress", "global_step", "scalars"):
        del doc["counters"][key]
    path.write_text(json.dumps(doc))
    report = read_report(path)
    assert report is not None and report.counters.progress is None
    assert report.counters.scalars == ()
