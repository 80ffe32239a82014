"""The ``s3://`` checkpoint store's pure parts: URLs, client settings, which uploads are stale.

The store against a real S3-compatible server: tests/integration/agent/test_s3_checkpoints.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agent.checkpoints import retrying, s3
from agent.checkpoints.errors import CheckpointStoreError
from agent.checkpoints.settings import CheckpointSettings
from agent.checkpoints.store import job_url, open_store
from agent.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://ckpt", "ckpt", ""),
        ("s3://ckpt/", "ckpt", ""),
        ("S3://ckpt/team-a/jobs", "ckpt", "team-a/jobs/"),
        ("s3://my.bucket-1//a//b/", "my.bucket-1", "a/b/"),
    ],
)
def test_a_url_names_a_bucket_and_a_prefix(url: str, bucket: str, prefix: str) -> None:
    location = s3.parse_url(url)
    assert (location.bucket, location.prefix) == (bucket, prefix)
    assert location.key("ckpt-1.json") == prefix + "ckpt-1.json"


def test_the_jobs_store_is_a_folder_under_the_prefix() -> None:
    location = s3.parse_url(job_url("s3://ckpt/jobs/", "digits"))
    assert (location.prefix, location.url) == ("jobs/digits/", "s3://ckpt/jobs/digits")
    assert s3.parse_url("s3://ckpt").url == "s3://ckpt"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("s3://", "not a bucket name"),
        ("s3://Upper/x", "not a bucket name"),
        ("s3://ab/x", "not a bucket name"),
        ("s3://a..b/x", "not a bucket name"),
        ("s3://ckpt/a/../b", "'..' are not key prefixes"),
        ("s3://ckpt/x?region=eu", "no query"),
        ("gs://ckpt/x", "not an s3:// URL"),
    ],
)
def test_a_bad_url_is_a_usage_error(url: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        s3.parse_url(url)


def test_object_names_stay_plain() -> None:
    location = s3.parse_url("s3://ckpt/jobs")
    for bad in ("", "a/b", ".probe"):
        with pytest.raises(ValueError, match="bad object name"):
            location.key(bad)


def test_a_custom_endpoint_gets_path_style_addressing() -> None:
    assert s3.client_settings({})["s3"] == {"addressing_style": "auto"}
    endpoint = {"AWS_ENDPOINT_URL": "http://10.0.0.5:9000"}
    assert s3.client_settings(endpoint)["s3"] == {"addressing_style": "path"}
    assert s3.client_settings({"AWS_ENDPOINT_URL_S3": "http://x"})["s3"]["addressing_style"] == (
        "path"
    )
    chosen = {**endpoint, "EDL_S3_ADDRESSING_STYLE": "Virtual"}
    assert s3.client_settings(chosen)["s3"] == {"addressing_style": "virtual"}
    with pytest.raises(ConfigError, match="EDL_S3_ADDRESSING_STYLE='sideways': one of path"):
        s3.client_settings({"EDL_S3_ADDRESSING_STYLE": "sideways"})


def test_only_uploads_begun_before_the_cutoff_are_stale() -> None:
    def at(hour: int) -> datetime:
        return datetime(2026, 1, 1, hour, tzinfo=UTC)

    uploads: list[dict[str, Any]] = [
        {"Key": "p/old.state", "UploadId": "u1", "Initiated": at(1)},
        {"Key": "p/new.state", "UploadId": "u2", "Initiated": at(5)},
        {"Key": "p/odd.state", "UploadId": "u3"},  # no time: never aborted on a guess
    ]
    assert list(s3.stale_uploads(uploads, at(3).timestamp())) == [("p/old.state", "u1")]


def test_the_settings_take_an_s3_url_without_reaching_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EDL_S3_ADDRESSING_STYLE", raising=False)
    settings = CheckpointSettings.from_env({"EDL_CHECKPOINT_URL": "s3://ckpt/jobs"})
    store = settings.store("digits")
    assert isinstance(store, s3.S3Prefix) and store.url == "s3://ckpt/jobs/digits"
    assert open_store("s3://ckpt").url == "s3://ckpt"
    with pytest.raises(ConfigError, match=r"--checkpoint-url.*not a bucket name"):
        CheckpointSettings.from_env({"EDL_CHECKPOINT_URL": "s3://B/jobs"})


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"need the AWS SDK: pip install 'edl-k8s\[s3\]'"):
        s3.open_url("s3://ckpt/jobs")


class _Bucket:
    """An S3 client's object calls over a dict; the first `refusals` PUTs are refused with
    `code`, as versitygw refuses one of two PUTs that create the same prefix at once."""

    def __init__(self, refusals: int, code: str = "ExistingObjectIsDirectory") -> None:
        self.objects: dict[str, bytes] = {}
        self.refusals = refusals
        self.code = code
        self.puts = 0

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> None:
        from botocore.exceptions import ClientError

        self.puts += 1
        if self.refusals > 0:
            self.refusals -= 1
            error = {"Error": {"Code": self.code, "Message": "Existing Object is a directory."}}
            raise ClientError(error, "PutObject")
        self.objects[Key] = Body

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        import io

        return {"Body": io.BytesIO(self.objects[Key])}

    def delete_object(self, Bucket: str, Key: str) -> None:
        del self.objects[Key]


def _prefix(bucket: _Bucket, sleeps: list[float]) -> s3.S3Prefix:
    location = s3.parse_url("s3://ckpt/jobs/digits")
    return s3.S3Prefix(location, lambda: bucket, sleep=sleeps.append)


def test_a_probe_refused_once_is_tried_again_and_the_store_is_usable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket, sleeps = _Bucket(refusals=1), list[float]()
    _prefix(bucket, sleeps).probe()
    assert (bucket.puts, sleeps, bucket.objects) == (2, [retrying.BACKOFF_SECONDS], {})
    assert "ExistingObjectIsDirectory" in caplog.text and "try 1 of 3" in caplog.text


def test_a_store_that_refuses_every_probe_is_not_usable() -> None:
    bucket, sleeps = _Bucket(refusals=10, code="AccessDenied"), list[float]()
    with pytest.raises(CheckpointStoreError, match="checkpoint store s3://ckpt/jobs/digits is not"):
        _prefix(bucket, sleeps).probe()
    assert bucket.puts == retrying.ATTEMPTS and len(sleeps) == retrying.ATTEMPTS - 1
