"""A `requests.Session` whose requests end at a total deadline, the response head included.

urllib3's read timeout bounds each `recv`, not the whole answer: a target that sends its
response head one byte a second never reaches it, and held a scrape thread for as long as it
liked (with `--scrape-concurrency` such pods, every scrape stopped). Here a watchdog thread
shuts the connection's socket down when the deadline set by `deadline()` passes; the blocked
read then ends with an error, which the scraper counts as a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection

_local = threading.local()


class _NoHeaderDefects(logging.Filter):
    """Drops urllib3's warning (with a traceback) about an answer's malformed head.

    A scrape target controls its head, so that warning was a log line per scrape of a hostile
    pod, and one for each scrape the deadline cut short mid-head; the scrape's own outcome
    (`edl_adapter_scrape_errors_total`) already tells.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to parse headers")


_NO_HEADER_DEFECTS = _NoHeaderDefects()


class _Watchdog:
    """Connections armed with a deadline; past it, their socket is shut down."""

    def __init__(self, tick_s: float = 0.2) -> None:
        self._tick_s = tick_s
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[float, HTTPConnection]] = {}
        self._thread: threading.Thread | None = None

    def arm(self, conn: HTTPConnection, deadline: float) -> None:
        with self._lock:
            self._armed[threading.get_ident()] = (deadline, conn)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="scrape-deadlines", daemon=True
                )
                self._thread.start()

    def disarm(self) -> None:
        with self._lock:
            self._armed.pop(threading.get_ident(), None)

    def _run(self) -> None:
        """Ticks while anything is armed; ends when nothing is (`arm` starts it again)."""
        while True:
            time.sleep(self._tick_s)  # the watchdog's own tick, not a wait on anyone
            now = time.monotonic()
            with self._lock:
                late = [k for k, (deadline, _) in self._armed.items() if deadline <= now]
                conns = [self._armed.pop(k)[1] for k in late]
                idle = not self._armed
                if idle:
                    self._thread = None
            for conn in conns:
                sock = conn.sock
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
            if idle:
                return


_WATCHDOG = _Watchdog()


class _Armed:
    """Arms the watchdog when a request is sent on this connection (fresh or reused)."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        deadline = getattr(_local, "deadline", None)
        if deadline is not None:
            assert isinstance(self, HTTPConnection)
            _WATCHDOG.arm(self, deadline)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _Connection(_Armed, HTTPConnection):
    pass


class _TLSConnection(_Armed, HTTPSConnection):
    pass


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


class _DeadlineAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}


def deadline_session(pool_size: int = 10) -> requests.Session:
    """A session whose requests made inside `deadline()` end by that deadline."""
    logging.getLogger("urllib3.connection").addFilter(_NO_HEADER_DEFECTS)  # once: a set
    session = requests.Session()
    adapter = _DeadlineAdapter(pool_connections=pool_size, pool_maxsize=pool_size)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


@contextlib.contextmanager
def deadline(at: float) -> Iterator[None]:
    """Requests of this thread's `deadline_session` end by `at` (`time.monotonic()`)."""
    _local.deadline = at
    try:
        yield
    finally:
        _local.deadline = None
        _WATCHDOG.disarm()
