"""The agent's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` (GET and HEAD).

One asyncio event loop on a daemon thread owns every connection, so a slow or idle client
costs a few KB, not a thread: a request head must arrive within `read_timeout` of its first
byte, an idle keep-alive connection is closed after `idle_timeout`, and at most
`max_connections` are open. Rendering (collectors may call NVML) runs on a small pool. It
serves a private registry (nothing is registered globally). `/healthz` answers as long as the
agent process can serve at all; `/readyz` asks the readiness check and says in words why it
is not ready. A client that hangs up mid-answer is not an error.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from agent.errors import ExporterError
from agent.readiness import Readiness, ReadinessCheck

log = logging.getLogger(__name__)

_TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class ExporterLimits:
    """Deadlines and sizes of the agent's endpoint."""

    read_timeout: float = 10.0
    """Seconds from a request's first byte to the end of its head."""
    idle_timeout: float = 30.0
    """Seconds a keep-alive connection may wait for its next request."""
    max_connections: int = 256
    """Open connections at most; more are closed at accept."""
    max_head_bytes: int = 16384
    """Largest request head; larger is 431."""
    backlog: int = 512
    """Listen backlog (pending connects the kernel keeps)."""


@dataclass(frozen=True)
class _Answer:
    code: int
    content_type: str
    body: bytes


_PHRASES = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


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
        self._open = 0

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
            family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
            sock = socket.create_server(
                (self._host, self._port), family=family, backlog=self.limits.backlog
            )
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                msg = f"port {self._port} on {self._host} is already in use"
            else:
                msg = f"cannot listen on {self._host}:{self._port}: {e.strerror or e}"
            raise ExporterError(msg) from e
        self._sock = sock
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="edl-exporter")
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
        self._stop = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            self._open += 1
            try:
                if self._open <= self.limits.max_connections:
                    await self._connection(reader, writer)
                    writer.close()  # after what is still buffered is sent, bounded
                    async with asyncio.timeout(2.0):
                        await writer.wait_closed()
            except (OSError, TimeoutError, asyncio.CancelledError, asyncio.IncompleteReadError):
                pass  # the client went away: nothing to report
            finally:
                self._open -= 1
                tasks.discard(task)
                writer.transport.abort()

        server = await asyncio.start_server(accepted, sock=sock)
        started.set()
        await self._stop.wait()
        server.close()
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.wait(list(tasks), timeout=2)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        buf = bytearray()
        while True:
            head = await self._read_head(reader, buf)
            if head is None:
                return
            if isinstance(head, _Answer):
                await self._send(writer, head, False, False)
                return
            method, path, keep_alive, accept = head
            if method not in ("GET", "HEAD"):
                answer = _Answer(405, _TEXT, b"method not allowed: use GET or HEAD\n")
            else:
                assert self._pool is not None
                answer = await loop.run_in_executor(self._pool, self._answer, path, accept)
            await self._send(writer, answer, method == "HEAD", keep_alive)
            if not keep_alive:
                return

    async def _read_head(
        self, reader: asyncio.StreamReader, buf: bytearray
    ) -> tuple[str, str, bool, str] | _Answer | None:
        """The next request's (method, path, keep-alive, Accept); an error answer; or None."""
        limits = self.limits
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (limits.read_timeout if buf else limits.idle_timeout)
        got_bytes = bool(buf)
        while True:
            while buf[:2] == b"\r\n" or buf[:1] == b"\n":  # empty lines before a request
                del buf[: 2 if buf[:1] == b"\r" else 1]
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buf[:end])
                del buf[: end + 4]
                return _parse_head(head)
            if len(buf) > limits.max_head_bytes:
                return _Answer(431, _TEXT, b"request head too large\n")
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await reader.read(65536)
            except TimeoutError:
                return _Answer(408, _TEXT, b"request timeout\n") if buf else None
            if not chunk:
                return _Answer(400, _TEXT, b"incomplete request\n") if buf else None
            if not got_bytes:
                got_bytes = True
                deadline = loop.time() + limits.read_timeout
            buf += chunk

    def _answer(self, path: str, accept: str) -> _Answer:
        if path == "/metrics":
            encoder, content_type = choose_encoder(accept)
            try:
                return _Answer(200, content_type, encoder(self._registry))
            except Exception as e:  # a scrape must fail loudly, not hang
                log.exception("metrics rendering failed")
                return _Answer(500, _TEXT, f"error: {e}\n".encode())
        if path == "/healthz":
            return _Answer(200, _TEXT, b"ok\n")
        if path == "/readyz":
            try:
                verdict = self._readiness()
            except Exception as e:
                verdict = Readiness(False, f"readiness check failed: {e}")
            text = ("ready: " if verdict.ready else "not ready: ") + verdict.reason + "\n"
            return _Answer(200 if verdict.ready else 503, _TEXT, text.encode())
        return _Answer(404, _TEXT, b"not found: try /metrics\n")

    async def _send(
        self, writer: asyncio.StreamWriter, answer: _Answer, head_only: bool, keep_alive: bool
    ) -> None:
        lines = [
            f"HTTP/1.1 {answer.code} {_PHRASES.get(answer.code, '')}",
            "Server: edl-agent",
            f"Content-Type: {answer.content_type}",
            f"Content-Length: {len(answer.body)}",
        ]
        if answer.code == 405:
            lines.append("Allow: GET, HEAD")
        if not keep_alive:
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        writer.write(data if head_only else data + answer.body)
        async with asyncio.timeout(self.limits.read_timeout):
            await writer.drain()

    def close(self) -> None:
        """Stops serving and releases the port (idempotent)."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._loop = None


def _parse_head(head: bytes) -> tuple[str, str, bool, str] | _Answer:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith(b"HTTP/1."):
        return _Answer(400, _TEXT, b"malformed request line\n")
    method, target, version = (p.decode("latin-1") for p in parts)
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            return _Answer(400, _TEXT, b"malformed header\n")
        fields[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    connection = fields.get("connection", "").lower()
    keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    if "transfer-encoding" in fields or fields.get("content-length", "0") not in ("", "0"):
        keep_alive = False  # a body we do not read: answer, then close
    return method, target.split("?", 1)[0], keep_alive, fields.get("accept", "")
