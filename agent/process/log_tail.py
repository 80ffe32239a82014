"""The trainer's stderr, passed through to the agent's and its last lines kept.

A crashed trainer's last lines (the exception, the framework's abort message) are what a
``JobFailed`` Event must name (`agent.elastic.failures`), and the agent cannot read them back
from the container's log. So the elastic agent starts its trainer with stderr on a pipe, and a
daemon thread per incarnation copies every byte to the agent's own stderr (the pod's log is
unchanged) while it keeps the last lines in a bounded ring.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import IO

JOIN_SECONDS = 1.0
"""After the trainer's exit, how long `lines` waits for the copy to reach the pipe's end."""


class StderrTail:
    """Copies each incarnation's stderr to `sink` and keeps its last `keep` lines."""

    def __init__(self, sink: IO[bytes], keep: int = 20, line_bytes: int = 1024) -> None:
        self._sink = sink
        self._keep = keep
        self._line_bytes = line_bytes
        self._lock = threading.Lock()
        self._lines: deque[bytes] = deque(maxlen=keep)
        self._partial = b""
        self._thread: threading.Thread | None = None

    def follow(self, stream: IO[bytes]) -> None:
        """Starts copying `stream` (a new incarnation's stderr); forgets the last one's lines."""
        with self._lock:
            self._lines = deque(maxlen=self._keep)
            self._partial = b""
        thread = threading.Thread(
            target=self._copy, args=(stream,), name="edl-trainer-stderr", daemon=True
        )
        self._thread = thread
        thread.start()

    def lines(self) -> tuple[str, ...]:
        """The last lines of the current (or last) incarnation, the unfinished one included."""
        thread = self._thread
        if thread is not None:
            thread.join(JOIN_SECONDS)  # the trainer has exited: the pipe ends at once
        with self._lock:
            kept = [*self._lines, *([self._partial] if self._partial else [])]
        return tuple(line.decode("utf-8", "replace") for line in kept)

    def _copy(self, stream: IO[bytes]) -> None:
        read = getattr(stream, "read1", stream.read)
        try:
            while chunk := read(65536):
                self._pass_on(chunk)
                self._note(chunk)
        except (OSError, ValueError):
            pass  # the pipe was closed under us (the agent is exiting)
        finally:
            stream.close()

    def _pass_on(self, chunk: bytes) -> None:
        try:
            self._sink.write(chunk)
            self._sink.flush()
        except (OSError, ValueError):
            pass  # our own stderr is gone: keep the tail all the same

    def _note(self, chunk: bytes) -> None:
        with self._lock:
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            for line in complete:
                self._lines.append(line[: self._line_bytes])
            self._partial = self._partial[: self._line_bytes]
