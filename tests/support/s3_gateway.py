"""A real S3-compatible server on 127.0.0.1 for the object-storage checkpoint tests.

versitygw (Apache-2.0), built from the Go module proxy by tests/integration/s3gateway/build.sh
(cached by version), serves a directory as S3 (its posix backend: a bucket is a folder, an
object a file). Clients reach it as a pod would reach S3: through the AWS SDK's standard
variables (`S3Gateway.env`), path-style addressing (`agent.checkpoints.s3`).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.net import free_port
from tests.support.new_pod import stop_server
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "integration" / "s3gateway" / "build.sh"
REGION = "us-east-1"
ACCESS_KEY = "edl-test"
TRIES = 5
"""Ports tried: another suite may take the chosen one between the check and the bind."""


def gateway_binary() -> Path:
    """The cached versitygw, built on first use (a cold build takes minutes)."""
    out = subprocess.run(
        ["bash", str(BUILD)], check=True, capture_output=True, text=True, timeout=1800
    )
    return Path(out.stdout.strip().splitlines()[-1])


class S3Gateway:
    """One running versitygw: its endpoint, root credentials and log."""

    def __init__(
        self, proc: subprocess.Popen[bytes], endpoint: str, log: Path, secret_key: str
    ) -> None:
        self.proc = proc
        self.endpoint = endpoint
        self.log = log
        self.access_key = ACCESS_KEY
        self.secret_key = secret_key

    @property
    def env(self) -> dict[str, str]:
        """What a pod's environment holds to reach this server (the AWS SDK's variables)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def client(self) -> Any:
        """A boto3 client of this server (what the test uses to look and to tamper)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}),
        )

    def stop(self) -> None:
        """Terminates the server (killed if it lingers)."""
        stop_server(self.proc)

    def bucket(self) -> str:
        """A new empty bucket."""
        name = f"edl-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name


def _start(binary: Path, data: Path, log: Path) -> S3Gateway | None:
    """A versitygw answering on a free port; None when another suite took the port first."""
    port, secret = free_port(), secrets.token_hex(16)
    command = [binary, "--port", f"127.0.0.1:{port}", "--region", REGION, "posix", data]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(c) for c in command],
            env={**os.environ, "ROOT_ACCESS_KEY_ID": ACCESS_KEY, "ROOT_SECRET_ACCESS_KEY": secret},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    gateway = S3Gateway(proc, f"http://127.0.0.1:{port}", log, secret)
    try:
        # Answered with our credentials: our server, not another suite's on that port.
        wait_for(
            lambda: gateway.client().list_buckets(),
            timeout_s=60,
            what=f"versitygw on 127.0.0.1:{port}",
            interval_s=0.1,
            give_up=lambda: proc.poll() is not None,
            describe=lambda: log.read_text(errors="replace")[-2000:],
        )
    except Exception:
        gateway.stop()
        if "address already in use" in log.read_text(errors="replace"):
            return None
        raise
    return gateway


@contextmanager
def running_gateway(workdir: Path) -> Iterator[S3Gateway]:
    """A versitygw serving `workdir`/data on a free loopback port, stopped on exit."""
    binary = gateway_binary()
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    for attempt in range(TRIES):
        gateway = _start(binary, data, workdir / f"versitygw-{attempt}.log")
        if gateway is None:
            continue
        try:
            yield gateway
        finally:
            gateway.stop()
        return
    raise RuntimeError(f"versitygw: every one of {TRIES} ports was taken before it bound it")
