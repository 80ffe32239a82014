"""Checkpoints on any fsspec URL, against a real server on 127.0.0.1: OpenSSH's sshd over SFTP.

tests/support/sftp_server.py starts sshd with keys of its own; the store reaches it as a pod
would, through an ``sftp://user@127.0.0.1:PORT/dir`` URL, fsspec's sftp filesystem (paramiko)
and fsspec's variables (``FSSPEC_SFTP_KEY_FILENAME``). SFTP is the honest test of this store:
an SFTP upload is not atomic (a reader sees a file grow), so the guarantees rest on what the
store does (a temporary dot-name, then a rename), where an object store would hide a mistake.
Round trip, a dropped connection (reconnected within the call), every pod lost (a new
process restores from the server alone, after the writer's process is gone), a corrupt or
half-gone newest checkpoint (the one before it is used), a writer killed midway through an
upload (the previous checkpoint stays usable; a later write removes its temporary file), and a
wrong key refused at probe time.
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
from agent.checkpoints.fsspec_store import FsspecFolder, default_filesystem, open_url
from agent.checkpoints.settings import CheckpointSettings
from tests.support.new_pod import RESTORER, ROOT, run_as_new_pod
from tests.support.sftp_server import SftpServer, running_sftp_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MiB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SftpServer]:
    with running_sftp_server(tmp_path_factory.mktemp("sshd")) as running:
        yield running


@pytest.fixture
def remote(server: SftpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on the server, and fsspec's configuration a pod would have to reach it.

    fsspec reads ``FSSPEC_*`` variables once, at import: in this process its table is set the
    same way (subprocesses below get the variables).
    """
    import fsspec.config

    monkeypatch.setitem(fsspec.config.conf, "sftp", {"key_filename": str(server.key)})
    folder = tmp_path / "served"
    folder.mkdir()
    return folder


def write(c: Checkpoints, step: int, payload: bytes) -> Manifest:
    return c.write(payload, step=step, generation=1, epoch=0, consumed=step, framework="paddle")


def on_disk(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_checkpoints_round_trip_through_the_server(server: SftpServer, remote: Path) -> None:
    settings = CheckpointSettings.from_env({"EDL_CHECKPOINT_URL": server.url(remote / "jobs")})
    store = settings.store("digits")
    store.probe()
    assert store.names() == []
    c = Checkpoints(store)
    write(c, 10, b"state at step 10")
    big = os.urandom(3 * MiB)
    newest = write(c, 20, big)

    assert c.newest_usable(lambda m, blob: blob) == (newest, big)
    assert [m.step for m in c.manifests()] == [20, 10]
    assert on_disk(remote / "jobs" / "digits") == [
        "ckpt-0000000001-g000001-s0000000010.json",
        "ckpt-0000000001-g000001-s0000000010.state",
        "ckpt-0000000002-g000001-s0000000020.json",
        "ckpt-0000000002-g000001-s0000000020.state",
    ]  # nothing else: the probe file is gone, no temporary names left
    assert (remote / "jobs" / "digits" / newest.payload_name).read_bytes() == big
    assert c.prune(1) == ["ckpt-0000000001-g000001-s0000000010"]
    assert store.names() == [newest.manifest_name, newest.payload_name]
    with pytest.raises(CheckpointMissing):
        store.get("ckpt-0000000001-g000001-s0000000010.state")
    store.delete("ckpt-0000000001-g000001-s0000000010.state")  # already gone: no error


def test_a_dropped_connection_costs_a_reconnect_and_no_call_fails(
    server: SftpServer, remote: Path
) -> None:
    store = open_url(server.url(remote / "digits"))
    c = Checkpoints(store)
    first = write(c, 10, b"state at step 10")
    fs, _ = store._folder()
    fs.client.close()  # the SSH connection drops under the store (a NAT's idle timeout, a restart)
    assert store.names() == [first.manifest_name, first.payload_name]  # on a new connection
    assert store._folder()[0] is not fs
    store._folder()[0].client.close()  # and again, before a write
    assert write(c, 20, b"state at step 20").seq == 2
    assert [m.step for m in c.manifests()] == [20, 10]


WRITER = """
import os, sys
from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.settings import CheckpointSettings
c = Checkpoints(CheckpointSettings.from_env(os.environ).store(os.environ["EDL_JOB"]))
for step in (10, 20, 30):
    c.write(f"state at step {step}".encode(), step=step, generation=1, epoch=0, consumed=step,
            framework="paddle")
"""


def test_every_pod_lost_a_new_process_restores_from_the_server_alone(
    server: SftpServer, remote: Path, tmp_path: Path
) -> None:
    url = server.url(remote / "jobs")
    wrote = run_as_new_pod(WRITER, url, tmp_path / "writer", server.env)
    assert wrote.returncode == 0, wrote.stderr  # the writer's process is gone
    restored = run_as_new_pod(RESTORER, url, tmp_path / "new-pod", server.env)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout) == [30, "state at step 30"]


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous(
    server: SftpServer, remote: Path
) -> None:
    invalid: list[tuple[str, str]] = []
    c = Checkpoints(
        open_url(server.url(remote / "digits")), lambda n, why: invalid.append((n, why))
    )
    write(c, 10, b"state at step 10")
    previous = write(c, 20, b"state at step 20")
    newest = write(c, 30, b"state at step 30")
    payload = remote / "digits" / newest.payload_name
    blob = bytearray(payload.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # the file rots on the server while no pod runs
    payload.write_bytes(bytes(blob))

    assert c.newest_usable(lambda m, blob: blob) == (previous, b"state at step 20")
    assert invalid == [(newest.name, "payload SHA-256 differs from the manifest's (corrupt)")]
    # Half gone (a payload deleted by hand): the same fallback, one further.
    (remote / "digits" / previous.payload_name).unlink()
    found = c.newest_usable(lambda m, blob: blob)
    assert found is not None and found[0].step == 10
    assert "payload missing (a partial checkpoint)" in invalid[-1][1]


KILLED_WRITER = """
import os, sys, threading
import paramiko
from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.fsspec_store import open_url
write_chunk = paramiko.SFTPFile._write
chunks = []
def stalling(self, data):
    chunks.append(1)
    if len(chunks) == 64:  # 2 MiB are on their way: the pod dies before the rest
        print("uploading", flush=True)
        threading.Event().wait()
    return write_chunk(self, data)
paramiko.SFTPFile._write = stalling
Checkpoints(open_url(sys.argv[1])).write(
    bytes(16 << 20), step=20, generation=2, epoch=0, consumed=0, framework="paddle"
)
"""


def test_a_writer_killed_midway_leaves_the_previous_checkpoint_and_its_file_is_swept(
    server: SftpServer, remote: Path
) -> None:
    url = server.url(remote / "digits")
    c = Checkpoints(open_url(url))
    previous = write(c, 10, b"state at step 10")
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, url],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **server.env},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "uploading\n"  # blocks until the chunks are up
    finally:
        writer.kill()
    assert writer.wait(30) == -signal.SIGKILL
    (partial,) = [n for n in on_disk(remote / "digits") if n.startswith(".")]
    assert partial.startswith(".ckpt-0000000002-g000002-s0000000020.state.tmp-")
    assert 0 < (remote / "digits" / partial).stat().st_size < 16 * MiB  # a part of it

    assert c.latest() == previous  # the dead write is invisible
    assert c.newest_usable(lambda m, blob: blob) == (previous, b"state at step 10")
    # A write by the next writer, a short while later: the fresh file is left alone (it could
    # be a live writer's) ...
    after = write(c, 20, b"state at step 20")
    assert after.seq == previous.seq + 1
    assert partial in on_disk(remote / "digits")
    # ... and once it is older than the stale age, the next write removes it.
    later = FsspecFolder(url, lambda: default_filesystem(url), wall=lambda: 1e10)
    assert later.sweep() == [partial]
    assert [n for n in on_disk(remote / "digits") if n.startswith(".")] == []
    assert c.newest_usable(lambda m, blob: blob) == (after, b"state at step 20")


def test_the_probe_refuses_a_wrong_key(
    server: SftpServer, remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec.config

    stranger = tmp_path / "stranger"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
        check=True,
        timeout=60,
    )
    monkeypatch.setitem(fsspec.config.conf, "sftp", {"key_filename": str(stranger)})
    store = open_url(server.url(remote / "x"))
    with pytest.raises(CheckpointStoreError, match=r"is not usable: AuthenticationException") as e:
        store.probe()
    cause: Any = e.value.__cause__
    assert type(cause).__name__ == "AuthenticationException"
    assert on_disk(remote / "x") == []
