"""Production serving: an asyncio HTTP/1.1 front end, the Flask app on a thread pool.

Why not gunicorn's gthread worker: it does the TLS handshake and reads request headers on its
request threads with no deadline, so a handful of half-open connections took every thread
and the aggregator's probe failed. Here one event loop owns every connection: the TLS
handshake, the request head and idle keep-alive each have a deadline, waiting costs a few KB
instead of a thread, and only complete, parsed requests reach the app's threads. Errors of the
HTTP layer itself (malformed heads, limits, timeouts) are ``metav1.Status`` JSON like the app's.

One process keeps one in-memory store (the adapter scales out by replicas, not processes).
Each request's environ carries the TLS peer certificate (``edl.peer_cert_der``) and the header
lines verbatim (``edl.header_lines``) for requestheader authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import email.utils
import gc
import io
import json
import logging
import resource
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_to_bytes

from metrics_adapter.api import wire_shapes as wire
from metrics_adapter.api.flask_app import (
    HEADER_LINES_ENVIRON_KEY,
    PEER_CERT_ENVIRON_KEY,
    USER_ENVIRON_KEY,
)
from metrics_adapter.errors import ConfigError
from metrics_adapter.http.blocking import DEFERRED_ENVIRON_KEY, INLINE_EXTENSION, on_loop
from metrics_adapter.http.request_parsing import (
    HeadLimits,
    HttpError,
    RequestHead,
    bad_request,
    oversize_error,
    parse_head,
    skip_empty_lines,
)
from metrics_adapter.http.tls import CertReloader, ServingCert
from metrics_adapter.settings import AdapterSettings

log = logging.getLogger(__name__)
access_log = logging.getLogger("metrics_adapter.access")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_READ_SIZE = 65536
_STREAM_AFTER = 256 * 1024  # bodies without Content-Length above this go out chunked
_LINGER_S = 0.5  # after an error, unread input is drained this long before the close
_LINGER_BYTES = 256 * 1024
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade"})


def _release_free_memory() -> None:
    """Give freed heap pages back to the OS after start-up (glibc ``malloc_trim``)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class ServerLimits:
    """Deadlines and sizes that keep slow or hostile clients from starving the server."""

    handshake_timeout: float = 10.0
    """Seconds a TLS handshake may take (from accept)."""
    header_timeout: float = 10.0
    """Seconds from a request's first byte (or the handshake) to the end of its head."""
    idle_timeout: float = 90.0
    """Seconds a keep-alive connection may wait for its next request."""
    write_timeout: float = 30.0
    """Seconds a response may take to be taken by the client."""
    max_connections: int = 1024
    """Open connections at most (handshaking, idle or busy); more are closed at accept."""
    max_inflight: int = 128
    """Requests queued or running in the app at most; more are answered 429."""
    max_body: int = 65536
    """Largest request body read (and discarded: only GET is served); larger is 413."""
    head: HeadLimits = field(default_factory=HeadLimits)

    @classmethod
    def from_settings(cls, s: AdapterSettings) -> ServerLimits:
        """The limits the settings ask for."""
        return cls(
            handshake_timeout=s.tls_handshake_timeout,
            header_timeout=s.request_header_timeout,
            idle_timeout=s.idle_timeout,
            write_timeout=s.write_timeout,
            max_connections=s.max_connections,
            max_inflight=max(s.threads, s.max_requests_inflight),
            head=HeadLimits(max_bytes=s.max_header_bytes),
        )


def status_body(code: int, reason: str, message: str) -> bytes:
    """A ``metav1.Status`` failure as JSON bytes."""
    return json.dumps(wire.status(code, reason, message), separators=(",", ":")).encode()


class _Closed(Exception):
    """The connection ended (or idled out) between requests: close without an answer."""


@dataclass
class _Outcome:
    """What the app answered, ready to be written (``streamed``: already written)."""

    code: int
    head: bytes = b""
    body: list[bytes] = field(default_factory=list)
    streamed: bool = False
    sent: int = 0
    close: bool = False


@dataclass
class _Unfinished:
    """An answer past the buffering limit with no Content-Length: the rest is streamed."""

    started: list[Any]
    pending: list[bytes]
    rest: Iterator[bytes]
    result: Iterable[bytes]


def _close_result(result: Iterable[bytes]) -> None:
    closer = getattr(result, "close", None)
    if closer is not None:
        closer()


def _http_date() -> str:
    return email.utils.formatdate(usegmt=True)


def _head_bytes(status: str, headers: list[tuple[str, str]], extra: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status}\r\n"]
    lines += [f"{k}: {v}\r\n" for k, v in headers if k.lower() not in _HOP_BY_HOP]
    lines += [f"{k}: {v}\r\n" for k, v in extra]
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _error_outcome(code: int, reason: str, message: str, head_only: bool, close: bool) -> _Outcome:
    body = status_body(code, reason, message)
    try:
        phrase = HTTPStatus(code).phrase
    except ValueError:
        phrase = reason
    extra = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    extra.append(("Date", _http_date()))
    if close:
        extra.append(("Connection", "close"))
    head = _head_bytes(f"{code} {phrase}", [], extra)
    return _Outcome(code, head, [] if head_only else [body], close=close)


class HttpFront:
    """Serves a WSGI app over HTTP/1.1 (optionally TLS) from one asyncio event loop.

    An app that can defer (``blocking.INLINE_EXTENSION`` in its ``extensions``) is called on
    the event loop itself: no hand-off to a thread and back, which was most of a small
    request's cost. A request that would wait on the network is deferred by the app and run
    again on an app thread; an answer too large to buffer is streamed from an app thread.
    Any other app runs on the threads only.

    Args:
        app: the WSGI application (on the event loop when it can defer, else on ``threads``
            worker threads).
        limits: deadlines and sizes.
        context: the TLS server context (None: plain HTTP).
        threads: app threads.
        log_access: write one access-log line per request.
    """

    def __init__(
        self,
        app: WsgiApp,
        limits: ServerLimits,
        context: ssl.SSLContext | None,
        threads: int,
        log_access: bool = False,
    ) -> None:
        self._app = app
        self._inline = bool(getattr(app, "extensions", {}).get(INLINE_EXTENSION))
        self.limits = limits
        self._context = context
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="http")
        self._log_access = log_access
        self.scheme = "https" if context is not None else "http"
        self._server_name = "localhost"
        self._server_port = "0"
        self.open_connections = 0
        self.refused_connections = 0
        self._refusal_logged = -60.0
        self._inflight = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    async def serve(self, sock: socket.socket, stop: asyncio.Event) -> None:
        """Serve on the bound socket until ``stop`` is set, then drain gracefully."""
        name = sock.getsockname()
        self._server_name, self._server_port = str(name[0]), str(name[1])
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_exception_handler)
        server = await asyncio.start_server(self._accepted, sock=sock, limit=_READ_SIZE)
        try:
            await stop.wait()
        finally:
            server.close()
            deadline = loop.time() + 5.0
            while self._inflight and loop.time() < deadline:
                await asyncio.sleep(0.05)
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=2.0)
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.open_connections += 1
        try:
            if self.open_connections > self.limits.max_connections:
                self._refuse_connection()
                writer.transport.abort()
                return
            der: bytes | None = None
            if self._context is not None:
                # The first await of this task: nothing has been read from the socket yet.
                await writer.start_tls(
                    self._context, ssl_handshake_timeout=self.limits.handshake_timeout
                )
                ssl_object = writer.get_extra_info("ssl_object")
                der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            await self._serve(reader, writer, der)
            await _close(writer)  # flushes what is still buffered (drain stops at high water)
        except (OSError, ssl.SSLError, EOFError, asyncio.IncompleteReadError, _Closed):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self.open_connections -= 1
            self._tasks.discard(task)
            writer.transport.abort()  # a no-op after a clean close

    def _refuse_connection(self) -> None:
        self.refused_connections += 1
        now = time.monotonic()
        if now - self._refusal_logged >= 60.0:
            self._refusal_logged = now
            log.warning(
                "%d connections open (--max-connections): closing new ones at accept "
                "(%d so far; logged at most once a minute)",
                self.limits.max_connections,
                self.refused_connections,
            )

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, der: bytes | None
    ) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        buf = bytearray()
        first = True
        while True:
            started = time.perf_counter()
            try:
                head = await self._read_head(reader, buf, first)
                started = time.perf_counter()  # the access log times the request, not the idle
                body = await self._read_body(reader, buf, head)
            except HttpError as e:
                outcome = _error_outcome(e.code, e.reason, e.message, False, True)
                await self._write(writer, outcome)
                self._access(peer, None, outcome, started, None)
                await self._linger(reader)
                return
            first = False
            close = not head.keep_alive or head.chunked
            environ = self._environ(head, peer, der, body)
            loop = asyncio.get_running_loop()
            answer: _Outcome | _Unfinished | None = None
            if self._inline:
                with on_loop():
                    answer = self._run_app(environ, head, close)
                if environ.get(DEFERRED_ENVIRON_KEY):  # it would block: a thread runs it
                    if isinstance(answer, _Unfinished):
                        _close_result(answer.result)
                    answer, environ = None, self._environ(head, peer, der, body)
            if isinstance(answer, _Outcome):
                outcome = answer
            elif answer is None and self._inflight >= self.limits.max_inflight:
                outcome = _error_outcome(
                    429,
                    "TooManyRequests",
                    "too many requests in flight, please retry",
                    head.method == "HEAD",
                    close,
                )
            else:
                self._inflight += 1
                try:
                    if answer is None:
                        outcome = await loop.run_in_executor(
                            self._pool, self._call_app, environ, head, close, writer, loop
                        )
                    else:
                        outcome = await loop.run_in_executor(
                            self._pool, self._finish, answer, close, writer, loop
                        )
                finally:
                    self._inflight -= 1
            if not outcome.streamed:
                await self._write(writer, outcome)
            self._access(peer, head, outcome, started, environ)
            if close or outcome.close:
                if head.chunked:
                    await self._linger(reader)
                return

    async def _read_head(
        self, reader: asyncio.StreamReader, buf: bytearray, first: bool
    ) -> RequestHead:
        loop = asyncio.get_running_loop()
        limits = self.limits
        started = bool(buf)
        wait = limits.header_timeout if (first or started) else limits.idle_timeout
        deadline = loop.time() + wait
        scanned = 0
        while True:
            skip = skip_empty_lines(buf)
            if skip:
                del buf[:skip]
                scanned = 0
            end = buf.find(b"\r\n\r\n", max(0, scanned - 3))
            if end >= 0:
                data = bytes(buf[:end])
                del buf[: end + 4]
                return parse_head(data, limits.head)
            scanned = len(buf)
            error = oversize_error(buf, limits.head)
            if error is not None:
                raise error
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await reader.read(_READ_SIZE)
            except TimeoutError:
                if buf:
                    raise HttpError(
                        408, "Timeout", "the request head was not received in time"
                    ) from None
                raise _Closed() from None
            if not chunk:
                if buf:
                    raise bad_request("the connection ended inside the request head")
                raise _Closed()
            if not started:
                started = True
                deadline = loop.time() + limits.header_timeout
            buf += chunk

    async def _read_body(
        self, reader: asyncio.StreamReader, buf: bytearray, head: RequestHead
    ) -> bytes:
        n = head.content_length
        if not n:
            return b""
        if n > self.limits.max_body:
            raise HttpError(
                413,
                "RequestEntityTooLarge",
                f"request body larger than {self.limits.max_body} bytes",
            )
        try:
            async with asyncio.timeout(self.limits.header_timeout):
                while len(buf) < n:
                    chunk = await reader.read(_READ_SIZE)
                    if not chunk:
                        raise bad_request("the connection ended inside the request body")
                    buf += chunk
        except TimeoutError:
            raise HttpError(408, "Timeout", "the request body was not received in time") from None
        body = bytes(buf[:n])
        del buf[:n]
        return body

    def _environ(
        self, head: RequestHead, peer: Any, der: bytes | None, body: bytes
    ) -> dict[str, Any]:
        target = head.target
        path, _, query = target.partition("?")
        if "://" in path:  # absolute-form (proxies): keep the path only
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        environ: dict[str, Any] = {
            "REQUEST_METHOD": head.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query,
            "RAW_URI": target,
            "REQUEST_URI": target,
            "SERVER_PROTOCOL": head.version,
            "SERVER_NAME": self._server_name,
            "SERVER_PORT": self._server_port,
            "REMOTE_ADDR": str(peer[0]),
            "REMOTE_PORT": str(peer[1]) if len(peer) > 1 else "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": self.scheme,
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            PEER_CERT_ENVIRON_KEY: der,
            HEADER_LINES_ENVIRON_KEY: head.headers,
        }
        for name, value in head.headers:
            if name == "content-type":
                environ["CONTENT_TYPE"] = value
            elif name == "content-length":
                environ["CONTENT_LENGTH"] = value
            elif "_" not in name:  # x_remote_user must not alias x-remote-user
                key = "HTTP_" + name.upper().replace("-", "_")
                old = environ.get(key)
                environ[key] = value if old is None else f"{old},{value}"
        return environ

    # ------------------------------------------------------------------ app threads

    def _call_app(
        self,
        environ: dict[str, Any],
        head: RequestHead,
        close: bool,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop,
    ) -> _Outcome:
        """Run the app on this worker thread; large unsized bodies are streamed from here."""
        answer = self._run_app(environ, head, close)
        if isinstance(answer, _Unfinished):
            return self._finish(answer, close, writer, loop)
        return answer

    def _finish(
        self,
        answer: _Unfinished,
        close: bool,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop,
    ) -> _Outcome:
        """Stream the rest of a large answer (on a worker thread), then close its iterable."""
        try:
            return self._stream(answer.started, answer.pending, answer.rest, close, writer, loop)
        finally:
            try:
                _close_result(answer.result)
            except Exception:
                log.exception("closing a streamed answer failed")

    def _run_app(
        self, environ: dict[str, Any], head: RequestHead, close: bool
    ) -> _Outcome | _Unfinished:
        """Call the app and buffer its answer, up to the point where it must be streamed."""
        head_only = head.method == "HEAD"
        started: list[Any] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            started[:] = [status, list(headers)]
            return lambda data: pending.append(data)

        pending: list[bytes] = []
        try:
            result = self._app(environ, start_response)
        except Exception:
            log.exception("internal error serving %s %s", head.method, head.target)
            return _error_outcome(
                500, "InternalError", "an internal error occurred", head_only, True
            )
        unfinished = False
        try:
            iterator = iter(result)
            size = sum(len(p) for p in pending)
            for chunk in iterator:
                if not chunk:
                    continue
                pending.append(chunk)
                size += len(chunk)
                if size > _STREAM_AFTER and not head_only and self._unsized(started):
                    unfinished = True
                    return _Unfinished(started, pending, iterator, result)
        except Exception:
            log.exception("internal error rendering %s %s", head.method, head.target)
            return _error_outcome(
                500, "InternalError", "an internal error occurred", head_only, True
            )
        finally:
            if not unfinished:
                _close_result(result)
        if not started:
            log.error("the app answered %s %s without start_response", head.method, head.target)
            return _error_outcome(
                500, "InternalError", "an internal error occurred", head_only, True
            )
        status, headers = started
        extra = [("Date", _http_date())]
        if not any(k.lower() == "content-length" for k, _ in headers):
            extra.append(("Content-Length", "0" if head_only else str(size)))
        if close:
            extra.append(("Connection", "close"))
        body = [] if head_only else pending
        return _Outcome(int(status.split(" ", 1)[0]), _head_bytes(status, headers, extra), body)

    @staticmethod
    def _unsized(started: list[Any]) -> bool:
        return bool(started) and not any(k.lower() == "content-length" for k, _ in started[1])

    def _stream(
        self,
        started: list[Any],
        pending: list[bytes],
        rest: Iterator[bytes],
        close: bool,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop,
    ) -> _Outcome:
        """Write the response in chunked encoding as the app produces it (bounded memory)."""
        status, headers = started
        extra = [("Date", _http_date()), ("Transfer-Encoding", "chunked")]
        if close:
            extra.append(("Connection", "close"))
        outcome = _Outcome(int(status.split(" ", 1)[0]), streamed=True)

        def push(data: bytes) -> None:
            future = asyncio.run_coroutine_threadsafe(self._send(writer, data), loop)
            future.result(self.limits.write_timeout + 1.0)
            outcome.sent += len(data)

        def framed(chunks: list[bytes]) -> bytes:
            data = b"".join(chunks)
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"

        try:
            push(_head_bytes(status, headers, extra) + framed(pending))
            batch: list[bytes] = []
            size = 0
            for chunk in rest:
                if chunk:
                    batch.append(chunk)
                    size += len(chunk)
                if size >= _STREAM_AFTER:
                    push(framed(batch))
                    batch, size = [], 0
            push((framed(batch) if batch else b"") + b"0\r\n\r\n")
        except Exception as e:  # the client went away or stopped reading: drop it
            log.debug("streamed response aborted: %s", e)
            outcome.close = True
        return outcome

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        async with asyncio.timeout(self.limits.write_timeout):
            await writer.drain()

    # ------------------------------------------------------------------ loop helpers

    async def _write(self, writer: asyncio.StreamWriter, outcome: _Outcome) -> None:
        data = outcome.head + b"".join(outcome.body)
        await self._send(writer, data)
        outcome.sent = len(data)

    async def _linger(self, reader: asyncio.StreamReader) -> None:
        """Drain unread input briefly, so closing does not reset the answer just sent."""
        taken = 0
        try:
            async with asyncio.timeout(_LINGER_S):
                while taken < _LINGER_BYTES:
                    chunk = await reader.read(_READ_SIZE)
                    if not chunk:
                        return
                    taken += len(chunk)
        except (TimeoutError, OSError):
            return

    def _access(
        self,
        peer: Any,
        head: RequestHead | None,
        outcome: _Outcome,
        started: float,
        environ: dict[str, Any] | None,
    ) -> None:
        if not self._log_access:
            return
        ms = int((time.perf_counter() - started) * 1000)
        line = f"{head.method} {head.target} {head.version}" if head else "-"
        user = (environ or {}).get(USER_ENVIRON_KEY) or "-"
        accept = (head.first("accept") if head else None) or "-"
        agent = (head.first("user-agent") if head else None) or "-"
        access_log.info(
            '%s "%s" %d %s %dms user="%s" accept="%s" agent="%s"',
            peer[0],
            _escape(line),
            outcome.code,
            outcome.sent or "-",
            ms,
            _escape(user),
            _escape(accept),
            _escape(agent),
        )


async def _close(writer: asyncio.StreamWriter, timeout: float = 2.0) -> None:
    """Close after the buffered answer is sent (TLS: with close_notify), bounded in time."""
    writer.close()
    with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
        async with asyncio.timeout(timeout):
            await writer.wait_closed()


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Connection-level failures caused by clients are not the server's errors: debug only."""
    exc = context.get("exception")
    if isinstance(exc, OSError | ssl.SSLError | EOFError):
        log.debug("connection error: %s", context.get("message"))
        return
    loop.default_exception_handler(context)


def bind(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening TCP socket on ``host:port``.

    Raises:
        ConfigError: the address cannot be bound (in use, not local, no permission).
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ][0]
        dualstack = family == socket.AF_INET6 and host in ("::", "")
        return socket.create_server(
            (host, port), family=family, backlog=backlog, dualstack_ipv6=dualstack
        )
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e


def _raise_open_files_limit(wanted: int) -> None:
    """Lift the soft open-files limit towards ``wanted`` (connections plus headroom)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-files limit to %d: %s", target, e)


class AdapterServer:
    """Runs the app built by ``app_factory`` behind :class:`HttpFront` until SIGTERM/SIGINT."""

    def __init__(
        self,
        settings: AdapterSettings,
        app_factory: Callable[[], WsgiApp],
        cert: ServingCert | None,
        context_factory: Callable[[], ssl.SSLContext] | None,
    ) -> None:
        self._settings = settings
        self._app_factory = app_factory
        self._cert = cert
        self._context_factory = context_factory

    def load(self) -> WsgiApp:
        """Build the app (and start its background work).

        Objects alive after start-up (modules, the app) are frozen out of the cyclic garbage
        collector and its first threshold is raised: the store's data is freed by reference
        counting, and full collections over a large store were the main source of tail latency.
        """
        app = self._app_factory()
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        _release_free_memory()
        return app

    def run(self) -> None:
        """Bind, build the app, serve until terminated; a generated temporary cert is removed."""
        s = self._settings
        limits = ServerLimits.from_settings(s)
        try:
            sock = bind(s.host, s.port)
            _raise_open_files_limit(limits.max_connections + 256)
            context = self._context_factory() if self._context_factory else None
            app = self.load()
            front = HttpFront(app, limits, context, s.threads, s.access_log)
            reloader = (
                CertReloader(self._cert, context)
                if self._cert is not None and context is not None
                else None
            )
            log.info("serving on %s:%d (%s)", s.host, sock.getsockname()[1], front.scheme)
            asyncio.run(self._main(front, sock, reloader))
        finally:
            if self._cert is not None:
                self._cert.cleanup()

    async def _main(
        self, front: HttpFront, sock: socket.socket, reloader: CertReloader | None
    ) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if reloader is not None:
            interval = max(0.5, self._settings.reload_interval)

            def check() -> None:
                try:
                    reloader.check()
                except Exception:  # never stop checking over one bad round
                    log.exception("serving certificate check failed")
                loop.call_later(interval, check)

            loop.call_later(interval, check)
        await front.serve(sock, stop)
