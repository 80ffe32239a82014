"""Checkpoints in S3 or an S3-compatible object store: ``s3://bucket/prefix``.

No volume every pod mounts: every pod reaches the bucket. Each object is one S3 object under
the prefix. An upload is atomic on its own (S3 shows an object only once its PUT, or its
multipart upload's completion, has succeeded; a reader sees the old object or the whole new
one), so the catalogue's payload-then-manifest order is the commit, as on a directory. A write
killed midway leaves either nothing or an incomplete multipart upload (only payloads of at
least `MULTIPART_BYTES` use one), invisible to readers but billed: later writes abort those
under the prefix older than `STALE_SECONDS`.

Where and as whom, the AWS SDK's own way (boto3, the ``s3`` extra): ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, IRSA or EKS Pod Identity, ``~/.aws``;
``AWS_REGION``; ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) for an S3-compatible server,
which then gets path-style addressing (``EDL_S3_ADDRESSING_STYLE`` overrides: path, virtual,
auto).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib.util import find_spec
from typing import Any

from agent.checkpoints.errors import CheckpointMissing, CheckpointStoreError
from agent.checkpoints.retrying import ATTEMPTS, retried
from agent.errors import ConfigError
from agent.protocol import env as names
from edl_common.version import install_command

log = logging.getLogger(__name__)

STALE_SECONDS = 6 * 3600.0
"""An incomplete multipart upload this old belongs to a writer that died (one write of even a
large checkpoint takes minutes; the margin also covers clock skew against the server's
``Initiated`` time)."""
MULTIPART_BYTES = 64 << 20
"""Objects from this size are uploaded in parts of this size, several at once (S3 takes at
most 5 GiB in one PUT and 10,000 parts: 640 GiB)."""
ADDRESSING_STYLES = ("path", "virtual", "auto")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})

Client = Any
"""A boto3 S3 client (boto3 ships no type hints)."""


@dataclass(frozen=True)
class Location:
    """A bucket and a key prefix (empty, or ending in ``/``)."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        """``s3://bucket/prefix``."""
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, name: str) -> str:
        """The object key of `name` (a plain name: no ``/``, no leading dot)."""
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad object name {name!r}")
        return self.prefix + name


def parse_url(url: str) -> Location:
    """``s3://bucket[/prefix]``; raises `ConfigError` for anything else."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "s3":
        raise ConfigError(f"{url!r} is not an s3:// URL")
    if "?" in rest or "#" in rest:
        raise ConfigError(f"s3 URL {url!r}: no query or fragment (settings come from AWS_*)")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ConfigError(f"s3 URL {url!r}: {bucket!r} is not a bucket name (3-63 of a-z 0-9 . -)")
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ConfigError(f"s3 URL {url!r}: '.' and '..' are not key prefixes")
    return Location(bucket, "".join(p + "/" for p in parts))


def client_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The botocore ``Config`` arguments for `env`: addressing, retries, timeouts.

    The SDK reads credentials, region and endpoint itself; only the addressing style is ours:
    path-style for a custom endpoint (an S3-compatible server seldom has wildcard DNS).
    """
    custom = bool(env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"))
    style = env.get(names.S3_ADDRESSING_STYLE, "").strip().lower() or ("path" if custom else "auto")
    if style not in ADDRESSING_STYLES:
        raise ConfigError(
            f"{names.S3_ADDRESSING_STYLE}={style!r}: one of {', '.join(ADDRESSING_STYLES)}"
        )
    return {
        "s3": {"addressing_style": style},
        "retries": {"mode": "standard", "max_attempts": 5},
        "connect_timeout": 10,
        "read_timeout": 120,
    }


def default_client(env: Mapping[str, str]) -> Client:
    """A boto3 S3 client configured from `env` and the SDK's usual sources."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client("s3", config=Config(**client_settings(env)))


def stale_uploads(uploads: list[dict[str, Any]], cutoff: float) -> Iterator[tuple[str, str]]:
    """(key, upload id) of the uploads begun before `cutoff` (Unix time)."""
    for upload in uploads:
        initiated = upload.get("Initiated")
        if isinstance(initiated, datetime) and initiated.timestamp() < cutoff:
            yield str(upload["Key"]), str(upload["UploadId"])


class S3Prefix:
    """A `CheckpointStore` under one prefix of one bucket.

    `client` makes the S3 client on first use (building one reads the SDK's service models:
    tenths of a second, spent only when the store is used, not when a URL is checked).
    """

    def __init__(
        self,
        location: Location,
        client: Callable[[], Client],
        multipart_bytes: int = MULTIPART_BYTES,
        stale_seconds: float = STALE_SECONDS,
        wall: Callable[[], float] = time.time,
        attempts: int = ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self.location = location
        self._make_client = client
        self._client: Client | None = None
        self.multipart_bytes = multipart_bytes
        self.stale_seconds = stale_seconds
        self._wall = wall
        self._attempts = attempts
        self._sleep = sleep

    @property
    def url(self) -> str:
        """``s3://bucket/prefix``."""
        return self.location.url

    def _s3(self) -> Client:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """SDK errors as `CheckpointStoreError` (`CheckpointMissing` for a missing key)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise CheckpointMissing(f"{doing}: no such object") from e
            raise CheckpointStoreError(f"{doing}: {e}") from e
        except (BotoCoreError, OSError) as e:
            raise CheckpointStoreError(f"{doing}: {e}") from e

    def probe(self) -> None:
        """Writes, reads back and removes a dot-object: no bucket or no rights fail now.

        Tried `attempts` times: the SDK retries only what it knows to be transient, and a
        job's pods probe one prefix at the same instant (`retrying`).
        """
        key = f"{self.location.prefix}.probe-{os.getpid()}-{secrets.token_hex(4)}"

        def write_read_remove() -> bool:
            s3 = self._s3()
            s3.put_object(Bucket=self.location.bucket, Key=key, Body=b"ok")
            same = s3.get_object(Bucket=self.location.bucket, Key=key)["Body"].read() == b"ok"
            s3.delete_object(Bucket=self.location.bucket, Key=key)
            return bool(same)

        where = f"checkpoint store {self.url} is not usable"
        ok = retried(
            write_read_remove,
            lambda: self._errors(where),
            attempts=self._attempts,
            sleep=self._sleep,
            log=log,
        )
        if not ok:
            raise CheckpointStoreError(f"checkpoint store {self.url} reads back other bytes")

    def put(self, name: str, data: bytes) -> None:
        """One PUT, or a multipart upload for a large object; then the stale-upload sweep."""
        key = self.location.key(name)
        with self._errors(f"cannot write s3://{self.location.bucket}/{key}"):
            s3 = self._s3()
            if len(data) < self.multipart_bytes:
                s3.put_object(Bucket=self.location.bucket, Key=key, Body=data)
            else:
                from boto3.s3.transfer import TransferConfig

                config = TransferConfig(
                    multipart_threshold=self.multipart_bytes,
                    multipart_chunksize=self.multipart_bytes,
                )
                # s3transfer aborts its multipart upload when a part fails; only a killed
                # process leaves one behind (swept below by a later write).
                s3.upload_fileobj(io.BytesIO(data), self.location.bucket, key, Config=config)
        self.sweep()

    def get(self, name: str) -> bytes:
        """The object's bytes."""
        key = self.location.key(name)
        with self._errors(f"cannot read s3://{self.location.bucket}/{key}"):
            body: bytes = self._s3().get_object(Bucket=self.location.bucket, Key=key)["Body"].read()
            return body

    def names(self) -> list[str]:
        """Objects directly under the prefix, dot-objects left out."""
        found = []
        with self._errors(f"cannot list {self.url}"):
            pages = (
                self._s3()
                .get_paginator("list_objects_v2")
                .paginate(Bucket=self.location.bucket, Prefix=self.location.prefix, Delimiter="/")
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    name = str(obj["Key"])[len(self.location.prefix) :]
                    if name and not name.startswith("."):
                        found.append(name)
        return sorted(found)

    def delete(self, name: str) -> None:
        """Deletes the object (S3 answers success for a missing key too)."""
        key = self.location.key(name)
        with self._errors(f"cannot delete s3://{self.location.bucket}/{key}"):
            self._s3().delete_object(Bucket=self.location.bucket, Key=key)

    def incomplete_uploads(self) -> list[dict[str, Any]]:
        """Multipart uploads under the prefix that were neither completed nor aborted."""
        uploads: list[dict[str, Any]] = []
        with self._errors(f"cannot list the uploads under {self.url}"):
            pages = (
                self._s3()
                .get_paginator("list_multipart_uploads")
                .paginate(Bucket=self.location.bucket, Prefix=self.location.prefix)
            )
            for page in pages:
                uploads.extend(page.get("Uploads", []))
        return uploads

    def sweep(self) -> list[str]:
        """Aborts incomplete uploads older than `stale_seconds`; returns their keys.

        Best effort: a store error is left for the next write.
        """
        cutoff = self._wall() - self.stale_seconds
        aborted = []
        try:
            for key, upload in stale_uploads(self.incomplete_uploads(), cutoff):
                with self._errors(f"cannot abort the upload of {key}"):
                    self._s3().abort_multipart_upload(
                        Bucket=self.location.bucket, Key=key, UploadId=upload
                    )
                aborted.append(key)
        except CheckpointStoreError:
            pass
        return aborted


def open_url(url: str) -> S3Prefix:
    """``s3://bucket/prefix``; the client is made on first use, from the environment."""
    location = parse_url(url)
    if find_spec("boto3") is None:
        raise ConfigError(f"s3:// checkpoints need the AWS SDK: {install_command('s3')}")
    env = dict(os.environ)
    client_settings(env)  # a bad EDL_S3_ADDRESSING_STYLE is a usage error, found now
    return S3Prefix(location, lambda: default_client(env))
