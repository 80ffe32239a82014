"""The agent's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` (GET and HEAD).

Served by the shared front end (:mod:`edl_common.http`) on an event loop of its own, on a
daemon thread, so a slow or idle client costs a few KB, not a thread, and gets the same
protections as the adapter's: a request head must arrive within `read_timeout`, an idle
keep-alive connection is closed after `idle_timeout`, and when `max_connections` are open a
new connection closes the one idle longest (then the one slowest to send its head) instead of
being turned away, so Prometheus' scrape is answered whatever the neighbours hold open.
Rendering (collectors may call NVML) runs on a small pool. It serves a private registry
(nothing is registered globally). `/healthz` answers as long as the agent process can serve at
all; `/readyz` asks the readiness check and says in words why it is not ready. A client that
hangs up mid-answer is not an error.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from agent.errors import ExporterError
from agent.readiness import Readiness, ReadinessCheck
from edl_common.http.admission import AdmissionLimits
from edl_common.http.request_head import HeadLimits, HttpError
from edl_common.http.server import Exchange, HttpServer, Request, Response, ServerLimits
from edl_common.http.sockets import ListenError, listen, raise_open_files_limit

log = logging.getLogger(__name__)

_TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class ExporterLimits:
    """Deadlines and sizes of the agent's endpoint."""

    read_timeout: float = 10.0
    """Seconds from a connection's start or a request's first byte to the end of its head."""
    idle_timeout: float = 30.0
    """Seconds a keep-alive connection may wait for its next request."""
    max_connections: int = 4096
    """Open connections at most (a few KB each); a new one beyond closes the one idle longest."""
    max_per_peer: int | None = 2048
    """Connections from one address at most (the same rule, within that address)."""
    max_head_bytes: int = 16384
    """Largest request head; larger is 431."""
    backlog: int = 512
    """Listen backlog (pending connects the kernel keeps)."""

    def server_limits(self) -> ServerLimits:
        """The shared front end's limits for these."""
        return ServerLimits(
            header_timeout=self.read_timeout,
            idle_timeout=self.idle_timeout,
            write_timeout=self.read_timeout,
            max_body=0,
            backlog=self.backlog,
            admission=AdmissionLimits(
                max_connections=self.max_connections, max_per_peer=self.max_per_peer
            ),
            head=HeadLimits(max_line=min(8192, self.max_head_bytes), max_bytes=self.max_head_bytes),
        )


def _text(code: int, text: str, *headers: tuple[str, str]) -> Response:
    return Response(
        code, [("Server", "edl-agent"), ("Content-Type", _TEXT), *headers], text.encode()
    )


class ExporterHandler:
    """Answers the three paths (exactly the request line's path); errors are one text line."""

    def __init__(
        self, registry: CollectorRegistry, readiness: ReadinessCheck, pool: ThreadPoolExecutor
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._pool = pool

    async def respond(self, request: Request) -> Response:
        """The answer to one request (rendering on the pool)."""
        head = request.head
        if head.method not in ("GET", "HEAD"):
            return _text(405, "method not allowed: use GET or HEAD\n", ("Allow", "GET, HEAD"))
        accept = head.first("accept") or ""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._answer, head.path, accept)

    async def screen(self, request: Request) -> Response | None:
        """Nothing to screen: a request body is refused by its size (``max_body`` is 0)."""
        return None

    def refuse(self, error: HttpError) -> Response:
        """An error of the HTTP layer as one line of text."""
        return _text(error.code, f"{error.message}\n")

    def finished(self, exchange: Exchange) -> None:
        """No access log: a scrape every few seconds would flood the pod's log."""

    def _answer(self, path: str, accept: str) -> Response:
        if path == "/metrics":
            encoder, content_type = choose_encoder(accept)
            try:
                body = encoder(self._registry)
            except Exception as e:  # a scrape must fail loudly, not hang
                log.exception("metrics rendering failed")
                return _text(500, f"error: {e}\n")
            return Response(200, [("Server", "edl-agent"), ("Content-Type", content_type)], body)
        if path == "/healthz":
            return _text(200, "ok\n")
        if path == "/readyz":
            try:
                verdict = self._readiness()
            except Exception as e:
                verdict = Readiness(False, f"readiness check failed: {e}")
            text = ("ready: " if verdict.ready else "not ready: ") + verdict.reason + "\n"
            return _text(200 if verdict.ready else 503, text)
        return _text(404, "not found: try /metrics\n")


class MetricsServer:
    """Serves the registry and the health endpoints on `host:port` from a daemon thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: ReadinessCheck,
        host: str,
        port: int,
        limits: ExporterLimits | None = None,
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._host = host
        self._port = port
        self.limits = limits or ExporterLimits()
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.front: HttpServer | None = None
        """The front end (its connection counters), once started."""

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._sock is None:
            return self._port
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        """Binds and starts serving.

        Raises:
            ExporterError: the address cannot be bound (in use, not local, no permission).
        """
        try:
            sock = listen(self._host, self._port, self.limits.backlog)
        except ListenError as e:
            raise ExporterError(str(e)) from e
        raise_open_files_limit(self.limits.max_connections + 256)
        self._sock = sock
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="edl-exporter")
        handler = ExporterHandler(self._registry, self._readiness, self._pool)
        self.front = HttpServer(handler, self.limits.server_limits())
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(sock, started), name="edl-exporter", daemon=True
        )
        self._thread.start()
        started.wait(10)

    def _run(self, sock: socket.socket, started: threading.Event) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve(sock, started))
        finally:
            self._loop.close()

    async def _serve(self, sock: socket.socket, started: threading.Event) -> None:
        assert self.front is not None
        self._stop = asyncio.Event()
        asyncio.get_running_loop().call_soon(started.set)
        await self.front.serve(sock, self._stop)

    def close(self) -> None:
        """Stops serving and releases the port (idempotent)."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._loop = None
