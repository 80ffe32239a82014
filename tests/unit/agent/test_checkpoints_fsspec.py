"""The fsspec checkpoint store's pure parts: which URLs it takes, that checking one reaches
nothing, and which temporary names its sweep removes.

The store against a real server (OpenSSH over SFTP):
tests/integration/agent/test_fsspec_checkpoints.py.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from agent.checkpoints import fsspec_store, retrying
from agent.checkpoints.errors import CheckpointMissing, CheckpointStoreError
from agent.checkpoints.settings import CheckpointSettings
from agent.checkpoints.store import open_store
from agent.errors import ConfigError

pytestmark = pytest.mark.unit


def test_every_other_scheme_goes_to_fsspec_and_nothing_is_reached_until_used() -> None:
    store = open_store("sftp://nobody@127.0.0.1:1/ckpt/jobs/")
    assert isinstance(store, fsspec_store.FsspecFolder)
    assert store.url == "sftp://nobody@127.0.0.1:1/ckpt/jobs"
    with pytest.raises(CheckpointStoreError, match=r"^checkpoint store sftp://.* is not usable: "):
        store.probe()  # port 1: nothing listens; the error comes when the store is used


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory://ckpt", "lives inside one process"),
        ("local:///ckpt", "use a plain path or file://"),
        ("simplecache::sftp://h/ckpt", "no chained fsspec URLs"),
        ("sftp://h/ckpt/../other", "'.' and '..' are not folders"),
        ("nosuch://ckpt", r"unknown scheme 'nosuch' \(a path, file://, s3://, or a protocol"),
    ],
)
def test_urls_it_cannot_hold_checkpoints_in_are_refused(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_store(url)
    with pytest.raises(ConfigError, match=f"^--checkpoint-url / EDL_CHECKPOINT_URL: .*{message}"):
        CheckpointSettings.from_env({"EDL_CHECKPOINT_URL": url})


@pytest.mark.skipif(find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_a_protocol_whose_package_is_missing_names_the_package() -> None:
    with pytest.raises(ConfigError, match=r"gs:// checkpoints need another package: .*gcsfs"):
        open_store("gs://bucket/ckpt")


def test_the_sweep_removes_only_temporary_files_of_writers_long_gone(tmp_path: Path) -> None:
    from fsspec.implementations.local import LocalFileSystem

    def folder() -> tuple[Any, str]:
        return LocalFileSystem(), str(tmp_path)

    now = 1_000_000.0
    store = fsspec_store.FsspecFolder(
        f"file://{tmp_path}", folder, stale_seconds=600, wall=lambda: now
    )
    old = ".ckpt-0000000002-g000001-s0000000020.state.tmp-999000-17-0a1b2c3d"
    fresh = ".ckpt-0000000003-g000001-s0000000030.state.tmp-999500-17-0a1b2c3d"
    for name in (old, fresh, ".probe-17-0a1b2c3d", ".notes.tmp-1-x"):
        (tmp_path / name).write_bytes(b"part")
    store.put("ckpt-0000000001-g000001-s0000000010.json", b"{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [fresh, ".probe-17-0a1b2c3d", ".notes.tmp-1-x", "ckpt-0000000001-g000001-s0000000010.json"]
    )  # the old one went with the write; anything not named as ours stays
    assert store.names() == ["ckpt-0000000001-g000001-s0000000010.json"]
    with pytest.raises(ValueError, match="bad object name"):
        store.put(".hidden", b"x")


class Connections:
    """A filesystem factory whose connections a test breaks: the first `refused` connects fail
    (a handshake that timed out), and `drop()` closes the open one under the store."""

    def __init__(self, root: Path, refused: int = 0) -> None:
        self.root = root
        self.refused = refused
        self.made = 0
        self.open: Connection | None = None

    def __call__(self) -> tuple[Any, str]:
        self.made += 1
        if self.made <= self.refused:
            raise TimeoutError("Error reading SSH protocol banner")
        self.open = Connection()
        return self.open, str(self.root)

    def drop(self) -> None:
        assert self.open is not None
        self.open.closed = True


class Connection:
    """A local filesystem that fails every call once closed, as paramiko's does."""

    def __init__(self) -> None:
        from fsspec.implementations.local import LocalFileSystem

        self.fs = LocalFileSystem()
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        if self.closed:
            raise OSError("Socket is closed")
        return getattr(self.fs, name)


NAME = "ckpt-0000000001-g000001-s0000000010.state"


def store_on(connections: Connections, sleeps: list[float]) -> fsspec_store.FsspecFolder:
    return fsspec_store.FsspecFolder(
        f"sftp://h{connections.root}", connections, sleep=sleeps.append
    )


def test_a_connection_dropped_between_checkpoints_costs_a_reconnect_not_the_call(
    tmp_path: Path,
) -> None:
    connections, sleeps = Connections(tmp_path), list[float]()
    store = store_on(connections, sleeps)
    store.put(NAME, b"state")
    connections.drop()  # a NAT forgot the idle SSH connection
    assert store.names() == [NAME]
    assert store.get(NAME) == b"state"
    assert (connections.made, sleeps) == (2, [retrying.BACKOFF_SECONDS])


def test_a_handshake_that_times_out_is_tried_again_and_then_the_write_is_there(
    tmp_path: Path,
) -> None:
    connections, sleeps = Connections(tmp_path, refused=2), list[float]()
    store = store_on(connections, sleeps)
    store.probe()
    store.put(NAME, b"state")
    assert (tmp_path / NAME).read_bytes() == b"state"
    assert connections.made == 3
    assert sleeps == [retrying.BACKOFF_SECONDS, 2 * retrying.BACKOFF_SECONDS]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.put(NAME, b"state"), f"^cannot write sftp://h.*/{NAME}: TimeoutError"),
        (lambda s: s.get(NAME), f"^cannot read sftp://h.*/{NAME}: TimeoutError"),
        (lambda s: s.delete(NAME), f"^cannot delete sftp://h.*/{NAME}: TimeoutError"),
        (lambda s: s.names(), "^cannot list sftp://h.*: TimeoutError"),
        (lambda s: s.probe(), r"^checkpoint store sftp://h.* is not usable: TimeoutError"),
    ],
)
def test_a_store_that_stays_unreachable_is_a_store_error_after_every_attempt(
    tmp_path: Path, call: Any, message: str
) -> None:
    connections, sleeps = Connections(tmp_path, refused=1_000), list[float]()
    with pytest.raises(CheckpointStoreError, match=message) as e:
        call(store_on(connections, sleeps))
    assert isinstance(e.value.__cause__, TimeoutError)  # the cause is kept
    assert connections.made == retrying.ATTEMPTS
    assert len(sleeps) == retrying.ATTEMPTS - 1


def test_a_missing_object_is_an_answer_and_is_not_tried_again(tmp_path: Path) -> None:
    connections, sleeps = Connections(tmp_path), list[float]()
    with pytest.raises(CheckpointMissing):
        store_on(connections, sleeps).get(NAME)
    assert (connections.made, sleeps) == (1, [])
