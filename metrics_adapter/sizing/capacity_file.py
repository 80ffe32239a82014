"""A capacity YAML file as the sizer's view of the cluster (``--sizing-capacity static``)."""

from __future__ import annotations

import logging
from pathlib import Path

from edl_sizing.capacity import (
    CapacityError,
    ClusterSnapshot,
    StaticCapacitySource,
    snapshot_from_yaml,
)
from metrics_adapter.filewatch import FileWatcher

log = logging.getLogger(__name__)


def load_capacity_file(path: Path) -> ClusterSnapshot:
    """Read one capacity file (the YAML form of :mod:`edl_sizing.capacity`).

    Raises:
        CapacityError: the file cannot be read or is invalid.
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise CapacityError(f"cannot read capacity file {path}: {e}") from e
    return snapshot_from_yaml(text, str(path))


class FileCapacitySource:
    """A capacity YAML file, re-read when its content changes (``--sizing-capacity static``).

    Whoever simulates the cluster (``make demo``) rewrites the file as pods come and go. A new
    version that does not parse is logged and the last good snapshot stays in force.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._watch = FileWatcher(path)
        self._watch.prime()  # before the read: a write after it is seen as a change
        self._source = StaticCapacitySource(load_capacity_file(path))

    def snapshot(self) -> ClusterSnapshot:
        """The file's latest valid content."""
        if self._watch.changed():
            try:
                self._source.replace(load_capacity_file(self._path))
            except CapacityError as e:
                log.warning("keeping the last good capacity: %s", e)
        return self._source.snapshot()
