"""Checkpoints in a directory: a ReadWriteMany PersistentVolumeClaim mounted by every pod.

Every object is one file. `put` writes a temporary dot-file in the same directory, fsyncs it,
renames it over the name and fsyncs the directory, so a reader (or the next pod, after a
crash or a power cut) sees the old file or the whole new one. A write killed midway leaves
only its dot-file; later writes remove dot-files older than `STALE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

from agent.checkpoints.errors import CheckpointMissing, CheckpointStoreError
from agent.errors import ConfigError

STALE_SECONDS = 600.0
"""A temporary file this old belongs to a write that died (one write takes seconds)."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalDirectory:
    """A `CheckpointStore` in one directory (created on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def url(self) -> str:
        """The directory."""
        return str(self.root)

    def _path(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad object name {name!r}")
        return self.root / name

    def probe(self) -> None:
        """Writes, reads back and removes a dot-file."""
        probe = self.root / f".probe-{os.getpid()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"ok")
            ok = probe.read_bytes() == b"ok"
            probe.unlink()
        except OSError as e:
            raise CheckpointStoreError(
                f"checkpoint directory {self.root} is not usable: {e}"
            ) from e
        if not ok:
            raise CheckpointStoreError(f"checkpoint directory {self.root} reads back other bytes")

    def put(self, name: str, data: bytes) -> None:
        """Temporary file, fsync, rename, fsync of the directory."""
        path = self._path(name)
        tmp = self.root / f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(self.root)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise CheckpointStoreError(f"cannot write {path}: {e}") from e
        self._sweep()

    def get(self, name: str) -> bytes:
        """The file's bytes."""
        path = self._path(name)
        try:
            return path.read_bytes()
        except FileNotFoundError as e:
            raise CheckpointMissing(f"{path} does not exist") from e
        except OSError as e:
            raise CheckpointStoreError(f"cannot read {path}: {e}") from e

    def names(self) -> list[str]:
        """Files that are not dot-files."""
        try:
            return sorted(n for n in os.listdir(self.root) if not n.startswith("."))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise CheckpointStoreError(f"cannot list {self.root}: {e}") from e

    def delete(self, name: str) -> None:
        """Unlinks the file."""
        try:
            self._path(name).unlink(missing_ok=True)
        except OSError as e:
            raise CheckpointStoreError(f"cannot delete {self.root / name}: {e}") from e

    def _sweep(self) -> None:
        """Removes temporary files of writes that died (best effort)."""
        cutoff = time.time() - STALE_SECONDS
        try:
            for entry in os.scandir(self.root):
                if entry.name.startswith(".") and ".tmp-" in entry.name:
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
        except OSError:
            pass


def open_url(url: str) -> LocalDirectory:
    """``/path``, ``file:///path`` (or ``file://localhost/path``)."""
    path = url
    if "://" in url:
        scheme, _, rest = url.partition("://")
        if scheme.lower() != "file":
            raise ConfigError(f"{url!r} is not a file URL")
        host, slash, tail = rest.partition("/")
        if host not in ("", "localhost"):
            raise ConfigError(f"file URL {url!r} names host {host!r}: only local paths")
        path = slash + tail
    if not path.startswith("/"):
        path = os.path.abspath(path)
    return LocalDirectory(Path(path))
