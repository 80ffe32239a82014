"""A `requests.Session` whose requests end at a total deadline, the response head included.

urllib3's read timeout bounds each `recv`, not the whole answer: a target that sends its
response head one byte a second never reaches it, and held a scrape thread for as long as it
liked (with `--scrape-concurrency` such pods, every scrape stopped). Here a watchdog thread
shuts the connection's socket down when the deadline set by `deadline()` passes; the blocked
read then ends with an error, which the scraper counts as a timeout. Each session owns its
watchdog (one thread, started while anything is armed) and its deadlines (per thread).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection


class _NoHeaderDefects(logging.Filter):
    """Drops urllib3's warning (with a traceback) about an answer's malformed head.

    A scrape target controls its head, so that warning was a log line per scrape of a hostile
    pod, and one for each scrape the deadline cut short mid-head; the scrape's own outcome
    (`edl_adapter_scrape_errors_total`) already tells.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to parse headers")


_NO_HEADER_DEFECTS = _NoHeaderDefects()


class Watchdog:
    """Connections armed with a deadline; past it, their socket is shut down."""

    def __init__(self, tick_s: float = 0.2) -> None:
        self._tick_s = tick_s
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[float, HTTPConnection]] = {}
        self._thread: threading.Thread | None = None

    def arm(self, conn: HTTPConnection, deadline: float) -> None:
        """Shut ``conn`` down at ``deadline`` unless this thread disarms first."""
        with self._lock:
            self._armed[threading.get_ident()] = (deadline, conn)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="scrape-deadlines", daemon=True
                )
                self._thread.start()

    def disarm(self) -> None:
        """This thread's connection is done in time."""
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


class _Armed:
    """Arms the session's watchdog when a request is sent on this connection (fresh or reused).

    ``_arm`` is the owning session's: each session's pool classes are made for it
    (:func:`_pool_classes`), since urllib3 builds connections from a class, not a factory.
    """

    _arm: Callable[[HTTPConnection], None]

    def request(self, *args: Any, **kwargs: Any) -> None:
        assert isinstance(self, HTTPConnection)
        self._arm(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


def _pool_classes(
    arm: Callable[[HTTPConnection], None],
) -> dict[str, type[urllib3.HTTPConnectionPool]]:
    """Connection pools whose connections arm ``arm`` before each request."""
    body = {"_arm": staticmethod(arm)}
    plain = type("DeadlineConnection", (_Armed, HTTPConnection), body)
    tls = type("DeadlineTLSConnection", (_Armed, HTTPSConnection), body)
    return {
        "http": type("DeadlinePool", (urllib3.HTTPConnectionPool,), {"ConnectionCls": plain}),
        "https": type("DeadlineTLSPool", (urllib3.HTTPSConnectionPool,), {"ConnectionCls": tls}),
    }


class _DeadlineAdapter(HTTPAdapter):
    def __init__(self, arm: Callable[[HTTPConnection], None], pool_size: int) -> None:
        self._pools = _pool_classes(arm)
        super().__init__(pool_connections=pool_size, pool_maxsize=pool_size)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(self._pools)


class DeadlineSession(requests.Session):
    """A session whose requests made inside :meth:`deadline` end by that deadline."""

    def __init__(self, pool_size: int = 10, watchdog: Watchdog | None = None) -> None:
        super().__init__()
        logging.getLogger("urllib3.connection").addFilter(_NO_HEADER_DEFECTS)  # once: a set
        self.watchdog = watchdog if watchdog is not None else Watchdog()
        self._local = threading.local()
        adapter = _DeadlineAdapter(self._arm, pool_size)
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    @contextlib.contextmanager
    def deadline(self, at: float) -> Iterator[None]:
        """This thread's requests end by ``at`` (``time.monotonic()``)."""
        self._local.at = at
        try:
            yield
        finally:
            self._local.at = None
            self.watchdog.disarm()

    def _arm(self, conn: HTTPConnection) -> None:
        at = getattr(self._local, "at", None)
        if at is not None:
            self.watchdog.arm(conn, at)
