"""Faults during elastic training, each bounded by a timeout and ending in a consistent world.

Real agents and Paddle gloo on 127.0.0.1 (the `Job` of tests/support/digits_job.py). After every
fault the job must finish with each sample of each epoch trained exactly once in the lineage
of the final model (the ledger) and without a second world (split brain).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from agent.trainer.ledger import verify
from tests.support.digits_job import NUM_TRAIN, Job
from tests.support.waiting import wait_for


def all_logs(job: Job) -> str:
    return "".join((job.tmp / f"{n}.log").read_text(errors="replace") for n in job.procs)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_nonsense_record_then_a_minute_without_the_store(tmp_path: Path) -> None:
    epochs = 12
    # held at its step gate between the events: the job cannot end before they are done
    job = Job(tmp_path, ["--epochs", str(epochs), "--seed", "1"], step_sleep=0.3, allowed_steps=0)
    try:
        job.start("a")
        job.start("b")
        wait_for(
            lambda: job.trained(2, 10),
            timeout_s=150,
            what="world of 2",
            interval_s=0.2,
            describe=job.describe,
        )
        gen = job.world()[0]

        (job.store / "digits" / "world.json").write_text('{"schema": 1, "generation": "x"}')
        wait_for(
            lambda: job.world()[0] > gen and job.trained(2, 5),
            timeout_s=90,
            what="a repaired world training",
            interval_s=0.2,
            describe=job.describe,
        )
        assert job.world()[1] == 2
        assert all_logs(job).count("world record invalid") == 1

        repaired = job.world()
        before = job.steps_done()
        job.allow(before + 1 + 40)
        shutil.move(job.store, tmp_path / "away")
        away = time.monotonic()
        wait_for(  # a world of 2 keeps training without the store
            lambda: job.steps_done() >= before + 30,
            timeout_s=300,
            what="30 steps trained without the store",
            interval_s=0.2,
            describe=job.describe,
        )
        time.sleep(max(0.0, away + 60 - time.monotonic()))  # the thing under test: a minute away
        shutil.move(tmp_path / "away", job.store)
        assert all(p.poll() is None for p in job.procs.values())
        job.release()

        wait_for(
            lambda: all(p.poll() is not None for p in job.procs.values()),
            timeout_s=240,
            what="the job to end",
            interval_s=0.2,
            describe=job.describe,
        )
        assert [p.returncode for p in job.procs.values()] == [0, 0]
        assert job.world() == repaired  # the outage itself changed nothing
        logs = all_logs(job)
        assert logs.count("membership store unreachable (") == 2  # one line per agent
        assert logs.count("membership store reachable again") == 2
        assert verify(job.ledger).problems(NUM_TRAIN, epochs) == []
    finally:
        job.stop_all()


def members(job: Job) -> list[str]:
    """The member ids of the job's current world record (empty while it cannot be read)."""
    try:
        raw = json.loads((job.store / "digits" / "world.json").read_text())
        return sorted(str(m["id"]) for m in raw["members"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_hung_trainer_and_a_member_lost_during_reinit(tmp_path: Path) -> None:
    epochs = 6
    job = Job(tmp_path, ["--epochs", str(epochs), "--seed", "2"], step_sleep=0.1, allowed_steps=0)
    # One bound at a time, whatever the machine's load: the world stands still while b is
    # stopped (nobody joins or leaves), so only the stall watchdog can act on b. The init
    # bound stays the job's (a bound on failure): the world without c is formed because
    # membership sees c gone, and a 30 s init bound here also timed a's trainer start and
    # its Paddle import on a loaded machine.
    bounds = {"EDL_DRAIN_TIMEOUT": "4", "EDL_STALL_TIMEOUT": "5"}
    bounds["EDL_CHECKPOINT_SECONDS"] = "1"
    try:
        job.start("a", **bounds)
        job.start("b", **bounds)
        job.start("c", **bounds)
        wait_for(
            lambda: job.trained(3, 10),
            timeout_s=360,
            what="world of 3 training",
            interval_s=0.2,
            describe=job.describe,
        )
        job.allow_more(20)  # b stops while the world trains, not while it waits at the gate

        hung = job.trainer_of("b")
        hung.send_signal(signal.SIGSTOP)  # b's trainer will never reach a step boundary
        # the watchdog excludes b; c vanishes as soon as the world without b is written,
        # while it re-initialises
        wait_for(
            lambda: members(job) not in ([], ["a", "b", "c"]),
            timeout_s=120,
            what="b excluded",
            interval_s=0.2,
            describe=job.describe,
        )
        kids = psutil.Process(job.procs["c"].pid).children()  # its trainer may be restarting
        job.procs["c"].kill()  # the whole pod vanishes
        for kid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(kid.pid, signal.SIGKILL)
        job.procs["c"].wait(10)
        job.release()  # the events are done: a trains the job to its end

        wait_for(
            lambda: job.procs["a"].poll() is not None,
            timeout_s=300,
            what="the job to end",
            interval_s=0.2,
            describe=job.describe,
        )
        # b's trainer stood still: its member was excluded (b exits 1), a went on and finished
        assert job.procs["b"].wait(30) == 1 and job.procs["a"].returncode == 0
        assert not hung.is_running() or hung.status() == psutil.STATUS_ZOMBIE
        assert "trainer stood still for" in (job.tmp / "b.log").read_text()
        report = verify(job.ledger)
        assert report.problems(NUM_TRAIN, epochs) == []
    finally:
        job.stop_all()
