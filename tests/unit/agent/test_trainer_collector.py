"""Trainer counters exported by the agent, across a simulated trainer restart."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.registry import CollectorRegistry

from agent.collectors.health import CollectorHealth
from agent.collectors.trainer import TrainerReportCollector
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.flushing import ReportFlusher
from agent.trainer.recording import StepRecorder
from agent.trainer.reports import TrainerReport, report_path, write_report
from tests.unit.agent.helpers import scrape

COUNTERS = (
    "edl_trainer_steps_total",
    "edl_trainer_samples_total",
    "edl_trainer_comm_seconds_total",
    "edl_trainer_comm_bytes_total",
    "edl_trainer_step_duration_seconds_count",
    "edl_trainer_step_duration_seconds_sum",
)


def registry_for(metrics_dir: Path, health: CollectorHealth) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainerReportCollector(metrics_dir, health))
    return registry


def incarnation(metrics_dir: Path, number: int) -> tuple[StepRecorder, ReportFlusher]:
    rec = StepRecorder()
    flusher = ReportFlusher(rec, report_path(metrics_dir, number), TrainerWorld(), number, 60)
    flusher.start()
    return rec, flusher


def train(rec: StepRecorder, steps: int) -> None:
    for _ in range(steps):
        rec.record_comm(0.001, 1000)
        rec.record_step(32, 0.02)


def test_counters_stay_monotonic_across_a_trainer_restart(tmp_path: Path) -> None:
    health = CollectorHealth()
    registry = registry_for(tmp_path, health)
    rec1, flusher1 = incarnation(tmp_path, 1)
    train(rec1, 10)
    flusher1.flush()
    before = scrape(registry)
    assert before["edl_trainer_steps_total"] == 10
    assert before["edl_trainer_samples_total"] == 320
    # The trainer dies without a goodbye; the agent starts incarnation 2, which starts at zero.
    rec2, flusher2 = incarnation(tmp_path, 2)
    at_restart = scrape(registry)
    for name in COUNTERS:
        assert at_restart[name] >= before[name], name
    train(rec2, 3)
    flusher2.close()
    after = scrape(registry)
    assert after["edl_trainer_steps_total"] == 13
    assert after["edl_trainer_samples_total"] == 13 * 32
    assert after["edl_trainer_comm_bytes_total"] == 13 * 1000
    assert after['edl_trainer_step_duration_seconds_bucket{le="0.025"}'] == 13
    assert after['edl_trainer_step_duration_seconds_bucket{le="0.01"}'] == 0
    assert after['edl_trainer_step_duration_seconds_bucket{le="+Inf"}'] == 13
    for name in COUNTERS:
        assert after[name] > before[name], name
    assert health.errors(TrainerReportCollector.NAME) == 0


def test_an_empty_directory_exports_zeros_not_nothing(tmp_path: Path) -> None:
    values = scrape(registry_for(tmp_path, CollectorHealth()))
    assert values["edl_trainer_steps_total"] == 0
    assert values['edl_trainer_step_duration_seconds_bucket{le="+Inf"}'] == 0
    assert "edl_trainer_last_step_timestamp_seconds" not in values


def test_reports_with_other_buckets_are_counted_but_kept_out_of_the_histogram(
    tmp_path: Path,
) -> None:
    odd = StepRecorder(bounds=(1.0,))
    odd.record_step(4, 0.5)
    write_report(report_path(tmp_path, 1), TrainerReport(1, 1, 0.0, 0.0, 0, 1, 0, odd.snapshot()))
    health = CollectorHealth()
    values = scrape(registry_for(tmp_path, health))
    assert values["edl_trainer_steps_total"] == 1
    assert values["edl_trainer_step_duration_seconds_count"] == 0
    assert health.errors(TrainerReportCollector.NAME) == 1


def test_a_corrupt_report_counts_an_error_and_the_rest_still_exports(tmp_path: Path) -> None:
    rec, flusher = incarnation(tmp_path, 1)
    train(rec, 2)
    flusher.close()
    (tmp_path / "trainer-000002.json").write_text("garbage")
    health = CollectorHealth()
    assert scrape(registry_for(tmp_path, health))["edl_trainer_steps_total"] == 2
    assert health.errors(TrainerReportCollector.NAME) == 1
