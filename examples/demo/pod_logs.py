"""Copies of the pods' logs that outlive the pods.

A kubelet removes a pod's log files with the pod, and the demo's summary may send the reader
to a trainer's log ("see the survivors' logs"). Each tick, what the kubelet's file of a
container gained since the last look is appended to ``<folder>/<pod>.log`` (the raw CRI
lines: time, stream, tag, text), for every file seen so far that still exists.
"""

from __future__ import annotations

from pathlib import Path


class PodLogCopies:
    """Keeps ``<folder>/<pod>.log`` growing with its container's log file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sources: dict[Path, tuple[str, int]] = {}
        """The kubelet's file -> (pod, bytes copied)."""

    def watch(self, pod: str, source: Path) -> None:
        """Copies `source` (a container's current log file) into `pod`'s copy from now on."""
        self._sources.setdefault(source, (pod, 0))

    def copy(self) -> None:
        """Appends what every watched file gained; a file gone (its pod deleted) is dropped."""
        for source, (pod, offset) in list(self._sources.items()):
            try:
                with source.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except FileNotFoundError:
                del self._sources[source]
                continue
            except OSError:
                continue
            if chunk:
                self.folder.mkdir(parents=True, exist_ok=True)
                with (self.folder / f"{pod}.log").open("ab") as out:
                    out.write(chunk)
                self._sources[source] = (pod, offset + len(chunk))
