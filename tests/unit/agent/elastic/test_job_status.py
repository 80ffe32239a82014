"""The job's one status (`agent.elastic.job_status`): its phase, its fields, when it is written."""

from __future__ import annotations

import pytest

from agent.elastic.failures import TrainerFailure
from agent.elastic.job_status import (
    PHASE_KEY,
    PREFIX,
    JobPhase,
    JobStatus,
    StatusReporter,
    duration_text,
    ended_status,
    job_phase,
)
from agent.elastic.world import Member, World

A = Member(joined=1.0, id="a", incarnation="x", host="127.0.0.1", ports=(7000, 7001))
G1 = World(1, (A,))


@pytest.mark.parametrize(
    ("world", "member_phase", "stepping", "phase"),
    [
        (None, "starting", False, JobPhase.PENDING),
        (World(3), "forming", False, JobPhase.PENDING),  # paused: below --min
        (G1, "standby", False, JobPhase.PENDING),
        (G1, "running", True, JobPhase.RUNNING),
        (G1, "running", False, JobPhase.RESCALING),  # not stepping in this world yet
        (G1, "draining", True, JobPhase.RESCALING),
        (G1, "regrouping", False, JobPhase.RESCALING),
        (G1.finish(9), "finished", False, JobPhase.SUCCEEDED),
        (G1.with_failures((TrainerFailure("a", 1, 0.0),), failed=True), "finished", False,
         JobPhase.FAILED),
    ],
)  # fmt: skip
def test_the_jobs_phase(
    world: World | None, member_phase: str, stepping: bool, phase: JobPhase
) -> None:
    assert job_phase(world, member_phase, stepping) is phase


def test_durations_read_as_kubernetes_writes_them() -> None:
    assert [duration_text(s) for s in (0, 0.2, 45, 90, 3600, 3723.4)] == [
        "0s", "1s", "45s", "1m30s", "1h0m0s", "1h2m4s"]  # fmt: skip


def test_the_fields_say_every_figure_and_unknowns_as_a_dash() -> None:
    status = JobStatus(
        JobPhase.RUNNING, 3, 7, global_step=120, progress=0.3456, eta_seconds=61,
        last_rescale="2026-12-06T15:00:00Z generation 7", last_rescale_reason="c joined",
    )  # fmt: skip
    fields = status.fields(0.0)
    assert fields[PHASE_KEY] == "Running" and fields[PREFIX + "progress"] == "34.6%"
    assert fields[PREFIX + "eta"] == "1m1s" and fields[PREFIX + "world-size"] == "3"
    assert fields[PREFIX + "last-rescale-reason"] == "c joined"
    assert fields[PREFIX + "status-updated"] == "1970-01-01T00:00:00Z"
    bare = JobStatus(JobPhase.PENDING, 0, 0).fields(0.0)
    assert bare[PREFIX + "progress"] == bare[PREFIX + "eta"] == bare[PREFIX + "global-step"] == "-"


def test_the_status_is_written_on_a_phase_change_at_once_else_every_interval() -> None:
    written: list[str] = []
    ok = [True]

    def write(fields: object) -> bool:
        assert isinstance(fields, dict)
        written.append(fields[PHASE_KEY])
        return ok[0]

    reporter = StatusReporter(write, interval=10)
    running, rescaling = JobStatus(JobPhase.RUNNING, 2, 1), JobStatus(JobPhase.RESCALING, 2, 1)
    assert reporter.report(running, now=0, wall=0)
    assert not reporter.report(running, now=5, wall=5)
    assert reporter.report(rescaling, now=6, wall=6)  # the phase changed: at once
    ok[0] = False
    assert not reporter.report(running, now=7, wall=7)  # a conflict: tried again next round
    ok[0] = True
    assert reporter.report(running, now=7.2, wall=7.2)
    assert reporter.report(running, now=17.2, wall=17.2)
    assert written == ["Running", "Rescaling", "Running", "Running", "Running"]


def test_a_job_over_is_written_once() -> None:
    written: list[object] = []

    def write(fields: object) -> bool:
        written.append(fields)
        return True

    reporter = StatusReporter(write, interval=10)
    done = JobStatus(JobPhase.SUCCEEDED, 1, 3, progress=1.0)
    assert reporter.report(done, now=0, wall=0)
    assert not reporter.report(done, now=100, wall=100)  # idle pods rewrite nothing
    assert len(written) == 1


def test_the_end_of_a_job_replaces_the_running_figures_it_makes_untrue() -> None:
    running = JobStatus(JobPhase.RUNNING, 2, 3, global_step=40, progress=0.437, eta_seconds=90)
    kept = running.fields(0.0)
    done = ended_status(kept, JobPhase.SUCCEEDED, 92)
    assert done[PHASE_KEY] == "Succeeded" and done[PREFIX + "eta"] == "0s"
    assert done[PREFIX + "progress"] == "-"  # not 43.7% beside Succeeded: the last report says
    assert done[PREFIX + "global-step"] == "92"
    assert ended_status(kept, JobPhase.SUCCEEDED, None)[PREFIX + "global-step"] == "-"
    failed = ended_status(kept, JobPhase.FAILED, None)
    assert failed[PREFIX + "progress"] == "43.7%" and failed[PREFIX + "global-step"] == "40"
    assert failed[PHASE_KEY] == "Failed" and failed[PREFIX + "eta"] == "-"
    last = JobStatus(JobPhase.SUCCEEDED, 0, 3, global_step=92, progress=1.0, eta_seconds=0)
    assert ended_status(last.fields(0.0), JobPhase.SUCCEEDED, 92) == last.fields(0.0)
    assert ended_status({}, JobPhase.SUCCEEDED, 92) == {}  # nothing reported, nothing to mend
