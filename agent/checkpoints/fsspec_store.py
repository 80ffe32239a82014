"""Checkpoints on any filesystem fsspec reaches: ``gs://``, ``az://``, ``sftp://``, ``webdav://``...

Every URL scheme the other stores do not take comes here (the ``fsspec`` extra, and the
protocol's own package: gcsfs, adlfs, paramiko, webdav4). fsspec promises less than one
backend does, so the store asks for the least: a write goes to a temporary dot-name in the
same folder and is then moved over the name (`fs.mv`: a POSIX rename on SFTP, a server-side
copy on object stores, whose uploads are whole or absent anyway), so a reader sees the old
object or the whole new one on every backend. A writer killed midway leaves only its
dot-object; its name carries the writer's clock, and later writes remove those older than
`STALE_SECONDS` (an object store's own unfinished uploads expire by its rules: GCS resumable
sessions after a week, Azure's uncommitted blocks likewise). Durability is the server's:
fsspec has no fsync; a payload lost to a crash fails its SHA-256 and the catalogue falls back.
After any error the store makes its filesystem anew (fsspec's sftp does not reconnect a dropped
connection) and tries the call again, `ATTEMPTS` times in all: an SSH connection a NAT dropped
while it idled between checkpoints, or a handshake that timed out on a loaded node, costs a
reconnect, not a checkpoint or a pod restart. What still fails after that is the caller's
`CheckpointStoreError`.

Where and as whom: the URL (``sftp://user@host:port/path``) and fsspec's configuration, read
from ``FSSPEC_<PROTOCOL>_<OPTION>`` variables (``FSSPEC_SFTP_KEY_FILENAME=/secrets/id``,
``FSSPEC_GCS_TOKEN=/secrets/sa.json``) or ``FSSPEC_CONFIG_DIR``, else the library's usual
chain (Application Default Credentials, ``AZURE_STORAGE_*``, ``~/.ssh``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from typing import Any, TypeVar

from agent.checkpoints.errors import (
    CheckpointError,
    CheckpointMissing,
    CheckpointStoreError,
)
from agent.checkpoints.retrying import ATTEMPTS, retried
from agent.errors import ConfigError
from edl_common.version import install_command

log = logging.getLogger(__name__)

STALE_SECONDS = 6 * 3600.0
"""A temporary object this old (by the clock its writer put in its name) belongs to a write
that died; the margin covers a large upload and clock skew between pods."""
REFUSED = {
    "memory": "it lives inside one process; pods cannot share it",
    "local": "use a plain path or file:// (the directory store)",
}
"""fsspec protocols that cannot hold a job's checkpoints, and why."""
_TEMPORARY = re.compile(r"^\.(?P<name>[^/]+)\.tmp-(?P<at>\d+)-\d+-[0-9a-f]+$")

T = TypeVar("T")

FileSystem = Any
"""An fsspec ``AbstractFileSystem`` (fsspec ships no type hints)."""


def _check_url(url: str) -> str:
    """The URL's protocol, when fsspec can open it; raises `ConfigError`."""
    protocol, sep, path = url.partition("://")
    protocol = protocol.lower()
    if not sep or not protocol:
        raise ConfigError(f"{url!r} is not a URL")
    if "::" in url:
        raise ConfigError(f"checkpoint URL {url!r}: no chained fsspec URLs (a cache layer)")
    if protocol in REFUSED:
        raise ConfigError(f"checkpoint URL {url!r}: {protocol}:// {REFUSED[protocol]}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ConfigError(f"checkpoint URL {url!r}: '.' and '..' are not folders")
    if find_spec("fsspec") is None:
        raise ConfigError(
            f"{protocol}:// checkpoints need fsspec: {install_command('fsspec')} "
            "(built in: a path, file://, s3://)"
        )
    import fsspec

    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError as e:
        raise ConfigError(
            f"checkpoint URL {url!r}: unknown scheme {protocol!r} (a path, file://, s3://, "
            "or a protocol fsspec knows: fsspec.available_protocols())"
        ) from e
    except ImportError as e:  # fsspec names the package: "Install gcsfs to access ..."
        raise ConfigError(f"{protocol}:// checkpoints need another package: {e}") from e
    return protocol


def _pipelined(f: Any) -> None:
    """Lets a file send writes without waiting for each one's answer, where it can.

    paramiko's SFTP file (fsspec's sftp) otherwise waits a round trip per 32 KiB: 1 MB/s on
    loopback (bench/bench_checkpoint_store.py). Errors still surface, at close.
    """
    pipelined = getattr(f, "set_pipelined", None)
    if callable(pipelined):
        pipelined(True)


def default_filesystem(url: str) -> tuple[FileSystem, str]:
    """The filesystem and folder of `url`, with fsspec's configuration (``FSSPEC_*``).

    A filesystem of its own, not fsspec's shared instance: the store replaces it after an error.
    """
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(url, skip_instance_cache=True)
    return fs, str(root).rstrip("/")


class FsspecFolder:
    """A `CheckpointStore` in one folder of an fsspec filesystem.

    `filesystem` makes (filesystem, folder) on first use: an SFTP filesystem connects when it
    is made, and a URL is checked at agent start without reaching the server.
    """

    def __init__(
        self,
        url: str,
        filesystem: Callable[[], tuple[FileSystem, str]],
        stale_seconds: float = STALE_SECONDS,
        wall: Callable[[], float] = time.time,
        attempts: int = ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self._url = url.rstrip("/")
        self._make = filesystem
        self._fs: tuple[FileSystem, str] | None = None
        self.stale_seconds = stale_seconds
        self._wall = wall
        self._attempts = attempts
        self._sleep = sleep

    @property
    def url(self) -> str:
        """The URL as given."""
        return self._url

    def _folder(self) -> tuple[FileSystem, str]:
        if self._fs is None:
            self._fs = self._make()
        return self._fs

    @staticmethod
    def _check_name(name: str) -> None:
        """A caller's mistake, raised before any connection (never retried, never wrapped)."""
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad object name {name!r}")

    def _path(self, name: str) -> str:
        """Where `name` lives; connects when no connection is open (so: inside `_retried`)."""
        return f"{self._folder()[1]}/{name}"

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """A backend's errors as `CheckpointStoreError` (`CheckpointMissing` for a missing one).

        fsspec backends raise what their client raises (OSError, paramiko's SSHException,
        an HTTP client's errors), so anything but our own errors is the store's.
        """
        try:
            yield
        except CheckpointError:
            raise
        except FileNotFoundError as e:
            raise CheckpointMissing(f"{doing}: no such object") from e
        except Exception as e:
            self._fs = None  # a dropped connection (SFTP does not reconnect): a new one next time
            raise CheckpointStoreError(f"{doing}: {type(e).__name__}: {e}") from e

    def _retried(self, doing: str, call: Callable[[], T]) -> T:
        """`call` under `_errors(doing)`, tried again on a new connection after a store error."""
        return retried(
            call, lambda: self._errors(doing), attempts=self._attempts, sleep=self._sleep, log=log
        )

    def _write(self, path: str, data: bytes) -> None:
        """`data` to a temporary dot-name beside `path`, then moved over it."""
        fs, root = self._folder()
        base = path.rsplit("/", 1)[-1]
        tmp = f"{root}/.{base}.tmp-{int(self._wall())}-{os.getpid()}-{secrets.token_hex(4)}"
        fs.makedirs(root, exist_ok=True)
        try:
            with fs.open(tmp, "wb") as f:
                _pipelined(f)
                f.write(data)
            fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                fs.rm_file(tmp)
            raise

    def probe(self) -> None:
        """Writes (through a move, as `put` does), reads back and removes a dot-object."""

        def write_read_remove() -> bool:
            fs, root = self._folder()
            probe = f"{root}/.probe-{os.getpid()}-{secrets.token_hex(4)}"
            self._write(probe, b"ok")
            ok: bool = fs.cat_file(probe) == b"ok"
            fs.rm_file(probe)
            return ok

        if not self._retried(f"checkpoint store {self.url} is not usable", write_read_remove):
            raise CheckpointStoreError(f"checkpoint store {self.url} reads back other bytes")

    def put(self, name: str, data: bytes) -> None:
        """Temporary dot-object, moved over the name; then the sweep of dead writes."""
        self._check_name(name)
        self._retried(
            f"cannot write {self.url}/{name}", lambda: self._write(self._path(name), data)
        )
        self.sweep()

    def get(self, name: str) -> bytes:
        """The object's bytes."""
        self._check_name(name)

        def read() -> bytes:
            with self._folder()[0].open(self._path(name), "rb") as f:
                prefetch = getattr(f, "prefetch", None)
                if callable(prefetch):  # paramiko: ask for every block at once
                    prefetch()
                data: bytes = f.read()
            return data

        return self._retried(f"cannot read {self.url}/{name}", read)

    def _listing(self) -> list[str]:
        """Every name in the folder, dot-objects included; none for a folder not made yet."""
        fs, root = self._folder()
        fs.invalidate_cache(root)  # another pod's writes, not this process's last listing
        try:
            listed = fs.ls(root, detail=False)
        except FileNotFoundError:
            return []
        return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in listed]

    def names(self) -> list[str]:
        """Objects in the folder, dot-objects left out."""
        return self._retried(
            f"cannot list {self.url}",
            lambda: sorted(n for n in self._listing() if n and not n.startswith(".")),
        )

    def delete(self, name: str) -> None:
        """Removes the object; no error when it is already gone."""
        self._check_name(name)

        def remove() -> None:
            with contextlib.suppress(FileNotFoundError):
                self._folder()[0].rm_file(self._path(name))

        self._retried(f"cannot delete {self.url}/{name}", remove)

    def sweep(self) -> list[str]:
        """Removes temporary objects whose writer's clock is over `stale_seconds` old.

        Returns their names. Best effort: a store error is left for the next write.
        """
        cutoff = self._wall() - self.stale_seconds
        removed = []
        try:
            with self._errors(f"cannot sweep {self.url}"):
                fs, root = self._folder()
                for name in self._listing():
                    match = _TEMPORARY.match(name)
                    if match and int(match["at"]) < cutoff:
                        with contextlib.suppress(FileNotFoundError):
                            fs.rm_file(f"{root}/{name}")
                        removed.append(name)
        except CheckpointStoreError:
            pass
        return removed


def open_url(url: str) -> FsspecFolder:
    """Any fsspec URL (``gs://bucket/prefix``, ``sftp://user@host/path``), unconnected."""
    _check_url(url)
    return FsspecFolder(url, lambda: default_filesystem(url))
