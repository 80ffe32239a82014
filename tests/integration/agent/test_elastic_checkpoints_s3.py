"""A job checkpointing to S3, or over SFTP through fsspec, is killed whole; new agents resume.

The real agents and Paddle trainers of tests/support/digits_job.py with
``--checkpoint-url s3://bucket/jobs`` against versitygw on 127.0.0.1 (tests/support/s3_gateway.py),
reached through the AWS SDK's variables as a pod reaches S3, and with
``--checkpoint-url sftp://user@127.0.0.1:PORT/dir`` against OpenSSH's sshd
(tests/support/sftp_server.py) through fsspec and ``FSSPEC_SFTP_KEY_FILENAME``. Every agent and
trainer is SIGKILLed at a seeded step, the newest checkpoint rots on the server, and two new
agents (new member ids, no local state) resume from the one before it: every sample is trained
exactly once more after the restore point, the job ends at its last step, and the finished
checkpoint is on the server.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.store import open_store
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
from tests.support.s3_gateway import running_gateway
from tests.support.sftp_server import running_sftp_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Remote:
    """Where the job checkpoints: its URL, the variables its pods get, and a way to rot a file."""

    def __init__(self, url: str, env: dict[str, str], rot: Callable[[str], None]) -> None:
        self.url = url
        self.env = env
        self.rot = rot


def flip_middle_byte(blob: bytes) -> bytes:
    rotten = bytearray(blob)
    rotten[len(rotten) // 2] ^= 0xFF
    return bytes(rotten)


@pytest.fixture(params=["s3", "sftp"])
def remote(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Remote]:
    if request.param == "s3":
        with running_gateway(tmp_path / "s3") as gateway:
            for name, value in gateway.env.items():
                monkeypatch.setenv(name, value)
            bucket, client = gateway.bucket(), gateway.client()

            def rot_object(key: str) -> None:
                blob = client.get_object(Bucket=bucket, Key=f"jobs/{key}")["Body"].read()
                client.put_object(Bucket=bucket, Key=f"jobs/{key}", Body=flip_middle_byte(blob))

            yield Remote(f"s3://{bucket}/jobs", gateway.env, rot_object)
        return
    with running_sftp_server(tmp_path / "sshd") as server:
        import fsspec.config

        monkeypatch.setitem(fsspec.config.conf, "sftp", {"key_filename": str(server.key)})
        served = tmp_path / "served"

        def rot_file(key: str) -> None:
            (served / key).write_bytes(flip_middle_byte((served / key).read_bytes()))

        yield Remote(server.url(served), server.env, rot_file)


@pytest.mark.timeout(480)
def test_a_job_killed_whole_resumes_from_the_remote_store(tmp_path: Path, remote: Remote) -> None:
    kill_at = random.Random("s3-kill").randint(25, 70)
    job = Job(tmp_path, TRAIN_ARGS, step_sleep=0.1, script=SCRIPTS["paddle"], allowed_steps=0)
    job.extra_env.update(
        remote.env,
        EDL_CHECKPOINT_URL=remote.url,
        EDL_CHECKPOINT_EVERY_STEPS=str(EVERY),
        EDL_CHECKPOINT_EVERY_SECONDS="0",
        EDL_CHECKPOINT_KEEP="3",
    )
    checkpoints = Checkpoints(open_store(f"{remote.url}/digits"))
    try:
        train_past(job, kill_at)
        kill_everything(job)
        last_started = started_steps(intents(job.ledger))
        manifests = checkpoints.manifests()
        assert len(manifests) >= 2 and manifests[0].step <= last_started < STEPS
        remote.rot(f"digits/{manifests[0].payload_name}")  # while no pod runs
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
        assert len(checkpoints.manifests()) == 3  # pruned to the last K, on the server
        print(
            f"killed after step {last_started}, resumed from {expected.name} in {remote.url}; "
            f"redone {report.rolled_back_steps} steps ({report.redone_samples} samples)"
        )
    finally:
        job.stop_all()
