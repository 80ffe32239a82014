"""Every pod of a job dies; new ones resume from its last durable checkpoint, still exactly once.

Real agents and trainers on 127.0.0.1 (the `Job` of tests/support/digits_job.py), checkpoints in a
directory as on a ReadWriteMany volume. A 2-rank job is SIGKILLed whole (every agent and
every trainer) at a seeded random step, as a node loss or a spot reclaim would; two new
agents start: the job resumes from the newest usable checkpoint, the samples trained after it
are redone (the ledger accounts for each) and none is lost, and the final accuracy matches a
one-process run (also for the DataLoader + data-parallel examples, `-ddp` and `-dp`). The
Paddle run also corrupts the newest checkpoint before the restart (the
one before it is used, with a log line and a metric), then loses the world record after the
end: a new agent reads the finished checkpoint and trains nothing. Without agents: a
checkpoint write SIGKILLed midway leaves the previous checkpoint usable.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent.checkpoints.catalogue import Checkpoints, Manifest
from agent.checkpoints.local import LocalDirectory
from agent.trainer.ledger import LedgerReport, verify
from agent.trainer.sampler import ElasticSampler
from tests.support.digits_job import (
    NUM_TRAIN,
    ROOT,
    SCRIPTS,
    Job,
    reference_accuracy,
)
from tests.support.waiting import wait_for

EPOCHS = 6
GLOBAL_BATCH = 64
SEED = 5
TRAIN_ARGS = ["--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH), "--seed", str(SEED)]
STEPS = EPOCHS * -(-NUM_TRAIN // GLOBAL_BATCH)
EVERY = 10


def step_sizes() -> list[int]:
    """The global batch of every step of the job (the last of an epoch is smaller)."""
    sampler, sizes = ElasticSampler(NUM_TRAIN, GLOBAL_BATCH, EPOCHS, SEED), []
    while (plan := sampler.plan(0, 1)) is not None:
        sizes.append(plan.global_count)
        sampler.advance(plan)
    return sizes


def kill_everything(job: Job) -> None:
    """SIGKILL every agent and every trainer of the job at once, as a lost node would."""
    trainers = [job.trainer_of(name) for name in job.procs]
    for trainer in trainers:
        # A trainer whose peer was killed a moment before may have exited on its own already
        # (a failed collective: exit 76): as dead as a killed one, not an error.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(trainer.pid, signal.SIGKILL)
    for proc in job.procs.values():
        proc.kill()
    for proc in job.procs.values():
        proc.wait(30)
    psutil.wait_procs(trainers, timeout=30)


def intents(ledger: Path) -> list[dict[str, Any]]:
    """Every step intent the trainers logged (each rank logs its own before the step)."""
    return [
        json.loads(line)
        for path in ledger.glob("ledger-*.jsonl")
        for line in path.read_text().splitlines()
        if '"s":' in line
    ]


def started_steps(records: list[dict[str, Any]]) -> int:
    """The highest global step any trainer began (its intent is logged before the step)."""
    return max(int(record["s"]) for record in records)


def begun_samples(records: list[dict[str, Any]], step: int) -> int:
    """The samples of `step` that its ranks had logged when the job was killed.

    The kill may land between the two ranks' intents for the last step; then only one
    rank's share of it was begun (and is redone).
    """
    return sum(len(record["ids"]) for record in records if record["s"] == step)


def metric(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def train_past(job: Job, kill_at: int) -> None:
    """Agents a and b form a world of 2 and train past step `kill_at` (10 steps more allowed:
    the kill lands while the job trains, and the job cannot end before it)."""
    job.start("a")
    job.start("b")

    def past_kill_at() -> bool:
        if job.world()[1] != 2:
            return False
        job.allow(kill_at + 10)
        return job.steps_done() >= kill_at

    wait_for(
        past_kill_at,
        timeout_s=240,
        what=f"a world of 2 past step {kill_at}",
        interval_s=0.2,
        describe=job.describe,
    )


def resume_to_the_end(job: Job) -> tuple[str, str, dict[str, Any], LedgerReport]:
    """After the kill: new agents c and d train the job to its end and idle on it.

    Returns rank 0's metrics, both agents' logs, the job's result and the ledger's report.
    """
    job.procs.clear()
    job.release()  # the kill is done: the resumed job trains to its end
    job.start("c", on_finished="idle")
    job.start("d", on_finished="idle")
    wait_for(
        job.result.exists,
        timeout_s=300,
        what="the resumed job to finish",
        interval_s=0.2,
        describe=job.describe,
    )
    wait_for(
        lambda: all("finished at step" in job.readyz(n)[1] for n in job.procs),
        timeout_s=60,
        what="every agent idling on the finished job",
        interval_s=0.2,
        describe=job.describe,
    )
    rank0 = job.metrics("c") if metric(job.metrics("c"), "edl_trainer_rank") == 0 else ""
    rank0 = rank0 or job.metrics("d")
    logs = "".join((job.tmp / f"{n}.log").read_text(errors="replace") for n in "cd")
    return rank0, logs, json.loads(job.result.read_text()), verify(job.ledger)


@pytest.mark.slow
@pytest.mark.timeout(480)
@pytest.mark.parametrize(
    ("framework", "corrupt"),
    [("paddle", True), ("torch", False), ("torch-ddp", False), ("paddle-dp", False)],
)
def test_a_job_killed_whole_resumes_from_its_last_checkpoint(
    tmp_path: Path, framework: str, corrupt: bool
) -> None:
    kill_at = random.Random(f"{framework}-kill").randint(25, 70)
    # Held at its step gate: the job cannot end before the kill, however slow the world of 2
    # is to form; it trains 10 steps past `kill_at` so the kill lands while it trains.
    job = Job(tmp_path, TRAIN_ARGS, step_sleep=0.1, script=SCRIPTS[framework], allowed_steps=0)
    volume = tmp_path / "volume"  # what every pod mounts
    job.extra_env.update(
        EDL_CHECKPOINT_URL=str(volume),
        EDL_CHECKPOINT_EVERY_STEPS=str(EVERY),
        EDL_CHECKPOINT_EVERY_SECONDS="0",
        EDL_CHECKPOINT_KEEP="3",
    )
    checkpoints = Checkpoints(LocalDirectory(volume / "digits"))
    try:
        train_past(job, kill_at)
        kill_everything(job)
        before_the_kill = intents(job.ledger)
        last_started = started_steps(before_the_kill)
        last_begun = begun_samples(before_the_kill, last_started)
        manifests = checkpoints.manifests()
        assert manifests and manifests[0].step <= last_started < STEPS
        expected: Manifest = manifests[0]
        if corrupt:  # the newest checkpoint rots on the volume while no pod runs
            payload = volume / "digits" / expected.payload_name
            blob = bytearray(payload.read_bytes())
            blob[len(blob) // 2] ^= 0xFF
            payload.write_bytes(bytes(blob))
            expected = manifests[1]

        rank0, logs, final, report = resume_to_the_end(job)
        restored_from = {report.restores[g]: name for g, name in report.checkpoints.items()}

        assert report.problems(NUM_TRAIN, EPOCHS) == [], report.problems(NUM_TRAIN, EPOCHS)
        assert final.get("global_step", report.steps) == report.steps == STEPS
        assert restored_from == {expected.step: expected.name}  # the last usable checkpoint
        redone = range(expected.step, last_started + 1)
        assert report.rolled_back_steps == len(redone)
        # Every earlier step was begun by both ranks (a rank logs step s+1 only after the
        # all-reduce of s, which needs the other's step s); the last, by one or by both.
        sizes = step_sizes()
        assert 0 < last_begun <= sizes[last_started]
        assert report.redone_samples == sum(sizes[s] for s in redone[:-1]) + last_begun
        assert f"restoring from checkpoint {expected.name} (step {expected.step}" in logs
        # Each trainer that restores reads the corrupt one again (a world of 1 may form, and
        # restore, before the second agent joins under load): at least once, never without it.
        invalid = metric(rank0, "edl_trainer_checkpoint_invalid_total")
        assert invalid >= 1 if corrupt else invalid == 0
        assert metric(rank0, "edl_trainer_checkpoint_last_step") == STEPS  # the finish
        assert metric(rank0, "edl_trainer_checkpoint_seconds_count") >= 1
        if corrupt:
            assert "payload SHA-256 differs from the manifest's (corrupt)" in logs
        latest = checkpoints.latest()
        assert latest is not None and latest.finished and latest.step == STEPS
        assert len(checkpoints.manifests()) == 3  # pruned to the last K
        print(
            f"killed after step {last_started}, resumed from {expected.name}; "
            f"redone {report.rolled_back_steps} steps ({report.redone_samples} samples)"
        )
        reference = reference_accuracy(tmp_path, TRAIN_ARGS, job.script)
        assert abs(final["accuracy"] - reference) <= 0.01
        if corrupt:
            a_lost_store_does_not_restart_the_finished_job(job)
    finally:
        job.stop_all()


def a_lost_store_does_not_restart_the_finished_job(job: Job) -> None:
    """The world record goes (a deleted ConfigMap): the finished checkpoint still says done."""
    for name in list(job.procs):
        job.procs[name].send_signal(signal.SIGTERM)
        assert job.procs[name].wait(30) == 0
    (job.store / "digits" / "world.json").unlink()
    lines = job.ledger_lines()
    job.start("late", on_finished="exit")
    assert job.procs["late"].wait(60) == 0
    log = (job.tmp / "late.log").read_text()
    assert f"the newest checkpoint says job digits finished at step {STEPS}" in log
    assert job.ledger_lines() == lines  # no trainer trained anything
    world = json.loads((job.store / "digits" / "world.json").read_text())
    assert world["finished"] is True and world["finished_at_step"] == STEPS


WRITER = """
import sys
from pathlib import Path
from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.local import LocalDirectory
Checkpoints(LocalDirectory(Path(sys.argv[1]))).write(
    bytes(int(sys.argv[2])), step=20, generation=2, epoch=0, consumed=0, framework="paddle"
)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_checkpoint_write_killed_midway_leaves_the_previous_one_usable(tmp_path: Path) -> None:
    directory = tmp_path / "digits"
    checkpoints = Checkpoints(LocalDirectory(directory))
    previous = checkpoints.write(
        b"the state at step 10", step=10, generation=1, epoch=0, consumed=640, framework="paddle"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(directory), str(256 << 20)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    wait_for(
        lambda: any(".tmp-" in p.name for p in directory.iterdir()),
        timeout_s=60,
        what="the write to begin",
        interval_s=0.001,
        give_up=lambda: writer.poll() is not None,
    )
    writer.kill()
    assert writer.wait(30) == -signal.SIGKILL
    assert [p.name for p in directory.iterdir() if ".tmp-" in p.name]  # the dead write's file

    assert checkpoints.latest() == previous
    assert checkpoints.newest_usable(lambda m, blob: blob) == (previous, b"the state at step 10")
    after = checkpoints.write(
        b"the state at step 20", step=20, generation=2, epoch=0, consumed=1280, framework="paddle"
    )
    assert after.seq == previous.seq + 1
    assert checkpoints.newest_usable(lambda m, blob: blob) == (after, b"the state at step 20")
