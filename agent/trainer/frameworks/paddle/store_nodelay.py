"""TCP_NODELAY on the connections of Paddle's TCPStore, which leaves Nagle's algorithm on.

Paddle 3.3.1's TCPStore client sends a request as several small writes (the command, then the
key), and the server answers a `get` the same way. With Nagle on, each second write waits for
the peer's ACK, which Linux delays up to 40 ms: every store round trip costs ~40 ms, and
forming a 3-rank gloo group makes ~15 of them. Measured on this project's VM (3 processes on
127.0.0.1, last rank's start to last rank's end of `ProcessGroupGloo.create`): 0.53-0.82 s as
Paddle ships, 0.02-0.05 s with TCP_NODELAY; creating the server store 0.09 s and 0.001 s.

Paddle gives neither an option nor a handle on its sockets, so while a group forms
`StoreNoDelay` sets the option on this process's TCP connections to or from the store's port,
found through ``/proc/self/fd`` (a sweep right away and then every `interval` seconds, until the
block ends). Connections on other ports are left as they are. Where ``/proc`` is missing
(not Linux) nothing is changed and the group forms as before, only slower.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 0.001
"""Between sweeps while a group forms: well under one delayed ACK (40 ms), a few microseconds
of work per socket."""


class StoreNoDelay:
    """A context in which every TCP connection of the store's port gets TCP_NODELAY."""

    def __init__(
        self,
        port: int,
        interval: float = SWEEP_INTERVAL_S,
        fd_dir: Path = Path("/proc/self/fd"),
    ) -> None:
        self._port = port
        self._interval = interval
        self._fd_dir = fd_dir
        self._done: set[str] = set()
        """Sockets (by ``socket:[inode]``) already set or not ours to set."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.tuned = 0
        """Connections this context set TCP_NODELAY on."""

    def __enter__(self) -> StoreNoDelay:
        self.sweep()
        self._thread = threading.Thread(target=self._run, name="edl-store-nodelay", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sweep()
        log.debug("TCP_NODELAY set on %d connection(s) of store port %d", self.tuned, self._port)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):  # ends with the block
            self.sweep()

    def sweep(self) -> int:
        """Sets TCP_NODELAY on the store's connections not seen before; returns how many."""
        try:
            names = os.listdir(self._fd_dir)
        except OSError:
            return 0  # no /proc: nothing to tune
        tuned = 0
        for name in names:
            try:
                target = os.readlink(self._fd_dir / name)
            except OSError:
                continue  # closed meanwhile, or not an fd entry
            if not target.startswith("socket:") or target in self._done:
                continue
            outcome = _tune(int(name), self._port)
            if outcome is not _Outcome.NOT_YET:
                self._done.add(target)
            tuned += outcome is _Outcome.TUNED
        self.tuned += tuned
        return tuned


class _Outcome(enum.Enum):
    TUNED = "tuned"
    NOT_OURS = "not ours"
    NOT_YET = "not yet"
    """A TCP socket on another local port with no peer yet: it may still connect to ours."""


def _tune(fd: int, port: int) -> _Outcome:
    try:
        sock = socket.socket(fileno=os.dup(fd))  # a duplicate: closing it keeps Paddle's fd
    except OSError:
        return _Outcome.NOT_YET  # closed meanwhile; the next sweep sees what replaced it
    try:
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return _Outcome.NOT_OURS
        local, peer = _port(sock.getsockname), _port(sock.getpeername)
        if port not in (local, peer):
            listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            return _Outcome.NOT_YET if peer is None and not listening else _Outcome.NOT_OURS
        # A listener (no peer) counts too: Linux passes TCP_NODELAY on to what it accepts.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Outcome.TUNED
    except OSError:
        return _Outcome.NOT_YET
    finally:
        sock.close()


def _port(address_of: Callable[[], object]) -> int | None:
    try:
        address = address_of()
    except OSError:
        return None  # e.g. no peer: not connected
    return int(address[1]) if isinstance(address, tuple) and len(address) >= 2 else None
