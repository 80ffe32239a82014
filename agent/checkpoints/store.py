"""The seam between the checkpoint catalogue and where the bytes live: a store of named objects.

A `CheckpointStore` holds one job's objects by name and guarantees one thing, which is all
the catalogue needs: a `put` is atomic (a reader sees the old object or the whole new one,
never part of it). Object storage gives that for every upload; a directory gives it with a
temporary name and a rename (`agent.checkpoints.local`). Checkpoints are addressed by URL,
fsspec style: ``/path`` or ``file:///path`` is the local backend, ``s3://bucket/prefix``
S3 or an S3-compatible server (`agent.checkpoints.s3`), and any other scheme fsspec's
(``gs://``, ``az://``, ``sftp://``...: `agent.checkpoints.fsspec_store`). A store of our own
for a scheme is one module with an ``open_url(url) -> CheckpointStore`` function plus one line
in `STORES`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Protocol

from agent.errors import ConfigError


class CheckpointStore(Protocol):
    """Named objects of one job. Errors: `CheckpointStoreError` (`CheckpointMissing` on get)."""

    @property
    def url(self) -> str:
        """Where the objects live (for log lines and errors)."""

    def probe(self) -> None:
        """Proves the store can be written and read back (at agent start: fail early)."""

    def put(self, name: str, data: bytes) -> None:
        """Stores `data` as `name`, atomically and durably, replacing any object of that name."""

    def get(self, name: str) -> bytes:
        """The object `name`; raises `CheckpointMissing` when there is none."""

    def names(self) -> list[str]:
        """Every object's name, sorted (an empty or absent store: none)."""

    def delete(self, name: str) -> None:
        """Removes `name`; no error when it is already gone."""


STORES: dict[str, str] = {
    "file": "agent.checkpoints.local",
    "s3": "agent.checkpoints.s3",
    "*": "agent.checkpoints.fsspec_store",
}
"""Registry: URL scheme -> module exposing ``open_url(url) -> CheckpointStore``; ``*`` takes
every other scheme (its module refuses the ones it cannot open)."""


def scheme_of(url: str) -> str:
    """The URL's scheme; a plain path (no ``://``) is ``file``."""
    head, sep, _ = url.partition("://")
    return head.lower() if sep else "file"


def job_url(url: str, job: str) -> str:
    """Where job `job`'s checkpoints live under `url` (jobs may share one volume)."""
    return f"{url.rstrip('/')}/{job}" if job else url


def open_store(url: str) -> CheckpointStore:
    """The store at `url`; raises `ConfigError` for an empty URL or an unknown scheme."""
    if not url.strip():
        raise ConfigError("checkpoint URL is empty")
    scheme = scheme_of(url)
    module = STORES.get(scheme) or STORES.get("*")
    if module is None or scheme == "*":
        raise ConfigError(
            f"checkpoint URL {url!r}: unknown scheme {scheme!r} (known: {', '.join(STORES)})"
        )
    store: CheckpointStore = import_module(module).open_url(url)
    return store
