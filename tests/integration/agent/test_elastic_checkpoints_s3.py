"""A job checkpointing to S3 is killed whole; new agents resume from the bucket alone.

The real agents and Paddle trainers of tests/support/digits_job.py with
``--checkpoint-url s3://bucket/jobs`` against versitygw on 127.0.0.1 (tests/support/s3_gateway.py),
reached through the AWS SDK's variables as a pod reaches S3. Every agent and trainer is SIGKILLed
at a seeded step, the newest checkpoint rots in the bucket, and two new agents (new member ids,
no local state) resume from the one before it: every sample is trained exactly once more after
the restore point, the job ends at its last step, and the finished checkpoint is in the bucket.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.s3 import open_url
from tests.integration.agent.test_elastic_checkpoints import (
    EPOCHS,
    EVERY,
    STEPS,
    TRAIN_ARGS,
    intents,
    kill_everything,
    metric,
    resume_to_the_end,
    started_steps,
    train_past,
)
from tests.support.digits_job import NUM_TRAIN, SCRIPTS, Job
from tests.support.s3_gateway import S3Gateway, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[S3Gateway]:
    with running_gateway(tmp_path / "s3") as running:
        yield running


@pytest.mark.timeout(480)
def test_a_job_killed_whole_resumes_from_the_bucket(
    tmp_path: Path, gateway: S3Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in gateway.env.items():
        monkeypatch.setenv(name, value)
    bucket = gateway.bucket()
    kill_at = random.Random("s3-kill").randint(25, 70)
    job = Job(tmp_path, TRAIN_ARGS, step_sleep=0.1, script=SCRIPTS["paddle"], allowed_steps=0)
    job.extra_env.update(
        gateway.env,
        EDL_CHECKPOINT_URL=f"s3://{bucket}/jobs",
        EDL_CHECKPOINT_EVERY_STEPS=str(EVERY),
        EDL_CHECKPOINT_EVERY_SECONDS="0",
        EDL_CHECKPOINT_KEEP="3",
    )
    checkpoints = Checkpoints(open_url(f"s3://{bucket}/jobs/digits"))
    try:
        train_past(job, kill_at)
        kill_everything(job)
        last_started = started_steps(intents(job.ledger))
        manifests = checkpoints.manifests()
        assert len(manifests) >= 2 and manifests[0].step <= last_started < STEPS
        s3 = gateway.client()
        key = f"jobs/digits/{manifests[0].payload_name}"
        blob = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        blob[len(blob) // 2] ^= 0xFF  # the newest checkpoint rots while no pod runs
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(blob))
        expected = manifests[1]

        rank0, logs, final, report = resume_to_the_end(job)
        restored_from = {report.restores[g]: name for g, name in report.checkpoints.items()}

        assert report.problems(NUM_TRAIN, EPOCHS) == [], report.problems(NUM_TRAIN, EPOCHS)
        assert final.get("global_step", report.steps) == report.steps == STEPS
        assert restored_from == {expected.step: expected.name}
        assert report.rolled_back_steps == last_started - expected.step + 1
        assert f"restoring from checkpoint {expected.name} (step {expected.step}" in logs
        assert "payload SHA-256 differs from the manifest's (corrupt)" in logs
        assert metric(rank0, "edl_trainer_checkpoint_invalid_total") >= 1
        latest = checkpoints.latest()
        assert latest is not None and latest.finished and latest.step == STEPS
        assert len(checkpoints.manifests()) == 3  # pruned to the last K, in the bucket
        print(
            f"killed after step {last_started}, resumed from {expected.name} in s3://{bucket}; "
            f"redone {report.rolled_back_steps} steps ({report.redone_samples} samples)"
        )
    finally:
        job.stop_all()
