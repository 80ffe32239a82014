"""Checkpoints on object storage, against a real S3-compatible server on 127.0.0.1.

versitygw (tests/support/s3_gateway.py) serves a directory as S3; the store reaches it as a
pod reaches S3, through the AWS SDK's variables (`AWS_ENDPOINT_URL`, keys, region) and an
``s3://bucket/prefix`` URL. Round trip (one PUT and a multipart upload), every pod lost (a new
process restores from the bucket alone), a corrupt or half-gone newest checkpoint (the one
before it is used), a writer killed midway through a multipart upload (the previous checkpoint
stays usable; a later write aborts the dead upload), and refusals at probe time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.checkpoints.catalogue import Checkpoints, Manifest
from agent.checkpoints.errors import CheckpointMissing, CheckpointStoreError
from agent.checkpoints.s3 import S3Prefix, open_url
from agent.checkpoints.settings import CheckpointSettings
from tests.support.new_pod import RESTORER, ROOT, run_as_new_pod
from tests.support.s3_gateway import S3Gateway, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MiB = 1 << 20


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Gateway]:
    with running_gateway(tmp_path_factory.mktemp("s3")) as running:
        yield running


@pytest.fixture
def bucket(gateway: S3Gateway, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket, and the environment a pod would have to reach it."""
    for name, value in gateway.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("EDL_S3_ADDRESSING_STYLE", raising=False)
    return gateway.bucket()


def write(c: Checkpoints, step: int, payload: bytes) -> Manifest:
    return c.write(payload, step=step, generation=1, epoch=0, consumed=step, framework="paddle")


def keys(gateway: S3Gateway, bucket: str) -> list[str]:
    listed = gateway.client().list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_checkpoints_round_trip_through_the_bucket(gateway: S3Gateway, bucket: str) -> None:
    settings = CheckpointSettings.from_env({"EDL_CHECKPOINT_URL": f"s3://{bucket}/team/jobs"})
    store = settings.store("digits")
    store.probe()
    assert store.names() == []
    c = Checkpoints(store)
    write(c, 10, b"state at step 10")
    big = os.urandom(12 * MiB)  # parts of 5 MiB: a multipart upload of three parts
    multipart = Checkpoints(S3Prefix(open_url(store.url).location, gateway.client, 5 * MiB))
    newest = write(multipart, 20, big)

    assert c.newest_usable(lambda m, blob: blob) == (newest, big)
    assert [m.step for m in c.manifests()] == [20, 10]
    prefix = "team/jobs/digits/"
    assert keys(gateway, bucket) == [
        prefix + "ckpt-0000000001-g000001-s0000000010.json",
        prefix + "ckpt-0000000001-g000001-s0000000010.state",
        prefix + "ckpt-0000000002-g000001-s0000000020.json",
        prefix + "ckpt-0000000002-g000001-s0000000020.state",
    ]  # nothing else: the probe object is gone, no temporary names
    assert gateway.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert c.prune(1) == ["ckpt-0000000001-g000001-s0000000010"]
    assert store.names() == [newest.manifest_name, newest.payload_name]
    with pytest.raises(CheckpointMissing):
        store.get("ckpt-0000000001-g000001-s0000000010.state")
    store.delete("ckpt-0000000001-g000001-s0000000010.state")  # already gone: no error


def test_every_pod_lost_a_new_process_restores_from_the_bucket_alone(
    gateway: S3Gateway, bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{bucket}/jobs"
    c = Checkpoints(open_url(f"{url}/digits"))
    for step in (10, 20, 30):
        write(c, step, f"state at step {step}".encode())
    # A new pod: another process, another working directory, nothing but its environment.
    out = run_as_new_pod(RESTORER, url, tmp_path / "new-pod", gateway.env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [30, "state at step 30"]


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous(
    gateway: S3Gateway, bucket: str
) -> None:
    invalid: list[tuple[str, str]] = []
    c = Checkpoints(open_url(f"s3://{bucket}/jobs/digits"), lambda n, why: invalid.append((n, why)))
    write(c, 10, b"state at step 10")
    previous = write(c, 20, b"state at step 20")
    newest = write(c, 30, b"state at step 30")
    s3 = gateway.client()
    key = f"jobs/digits/{newest.payload_name}"
    blob = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    blob[len(blob) // 2] ^= 0xFF  # the object rots in the bucket while no pod runs
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(blob))

    assert c.newest_usable(lambda m, blob: blob) == (previous, b"state at step 20")
    assert invalid == [(newest.name, "payload SHA-256 differs from the manifest's (corrupt)")]
    # Half gone (a payload deleted by hand, a lifecycle rule): the same fallback, one further.
    s3.delete_object(Bucket=bucket, Key=f"jobs/digits/{previous.payload_name}")
    found = c.newest_usable(lambda m, blob: blob)
    assert found is not None and found[0].step == 10
    assert "payload missing (a partial checkpoint)" in invalid[-1][1]


WRITER = """
import os, sys, threading
from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.s3 import S3Prefix, default_client, parse_url
s3 = default_client(os.environ)
parts = []
def after_part(**kwargs):
    parts.append(1)
    if len(parts) == 2:  # two parts are in the bucket: the pod dies before the rest
        print("uploading", flush=True)
        threading.Event().wait()
s3.meta.events.register("after-call.s3.UploadPart", after_part)
store = S3Prefix(parse_url(sys.argv[1]), lambda: s3, multipart_bytes=5 << 20)
Checkpoints(store).write(
    bytes(40 << 20), step=20, generation=2, epoch=0, consumed=0, framework="paddle"
)
"""


def test_a_writer_killed_midway_leaves_the_previous_checkpoint_and_its_upload_is_swept(
    gateway: S3Gateway, bucket: str
) -> None:
    url = f"s3://{bucket}/jobs/digits"
    c = Checkpoints(open_url(url))
    previous = write(c, 10, b"state at step 10")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "uploading\n"  # blocks until the parts are up
    finally:
        writer.kill()
    assert writer.wait(30) == -signal.SIGKILL
    s3 = gateway.client()
    uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [u["Key"] for u in uploads] == ["jobs/digits/ckpt-0000000002-g000002-s0000000020.state"]

    assert c.latest() == previous  # the dead write is invisible
    assert c.newest_usable(lambda m, blob: blob) == (previous, b"state at step 10")
    # A write by the next writer, a short while later: the fresh upload is left alone (it
    # could be a live writer's) ...
    after = write(c, 20, b"state at step 20")
    assert after.seq == previous.seq + 1
    assert len(s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])) == 1
    # ... and once it is older than the stale age, the next write aborts it.
    later = S3Prefix(
        open_url(url).location, gateway.client, wall=lambda: 1e10
    )  # the clock of a writer far in the future
    assert later.sweep() == ["jobs/digits/ckpt-0000000002-g000002-s0000000020.state"]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert c.newest_usable(lambda m, blob: blob) == (after, b"state at step 20")


def test_the_probe_refuses_a_missing_bucket_and_wrong_keys(
    gateway: S3Gateway, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CheckpointStoreError, match=r"s3://no-such-bucket/x is not usable: .*"):
        open_url("s3://no-such-bucket/x").probe()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    store = open_url(f"s3://{bucket}/x")
    with pytest.raises(CheckpointStoreError, match="is not usable") as refused:
        store.probe()
    error: Any = refused.value.__cause__
    assert error.response["Error"]["Code"] == "SignatureDoesNotMatch"
