"""The adapter's side of the shared HTTP front end: the WSGI bridge, Status errors, serving.

The connections, deadlines, caps and h11 framing are :mod:`edl_common.http` (the agent's
exporter serves through the same code). What is the adapter's own lives here: errors of the
HTTP layer as ``metav1.Status`` JSON like the app's, the request filters (authentication,
authorisation: :mod:`metrics_adapter.api.filters`) called on the event loop and, where they
would wait on the network (:mod:`metrics_adapter.auth.blocking`), on a thread, then the Flask
app called once, the 429 cap on requests on the threads, the access log, and the serving loop
with certificate reloads (:mod:`metrics_adapter.http.tls`).

One process keeps one in-memory store (the adapter scales out by replicas, not processes).
Each request's environ carries the TLS peer certificate (``edl.peer_cert_der``) and the header
lines verbatim (``edl.header_lines``) for requestheader authentication.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

from edl_common.http.admission import AdmissionLimits
from edl_common.http.memory import MemoryBudget
from edl_common.http.request_head import HeadLimits, HttpError, RequestHead
from edl_common.http.server import Exchange, HttpServer, Request, Response, ServerLimits
from edl_common.http.sockets import ListenError, listen, raise_open_files_limit
from metrics_adapter.api import wire_shapes as wire
from metrics_adapter.api.filters import (
    HEADER_LINES_ENVIRON_KEY,
    PEER_CERT_ENVIRON_KEY,
    USER_ENVIRON_KEY,
    RequestFilters,
)
from metrics_adapter.api.flask_app import FILTERS_EXTENSION, INLINE_EXTENSION, OFF_LOOP_EXTENSION
from metrics_adapter.auth.blocking import WouldBlock, on_loop
from metrics_adapter.auth.identity import ANONYMOUS
from metrics_adapter.errors import ConfigError
from metrics_adapter.http.tls import CertReloader, ServingCert
from metrics_adapter.settings import AdapterSettings

log = logging.getLogger(__name__)
access_log = logging.getLogger("metrics_adapter.access")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_T = TypeVar("_T")

_STREAM_AFTER = 256 * 1024  # bodies without Content-Length above this go out chunked
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade"})
_BACKLOG = 1024


def server_limits(s: AdapterSettings) -> ServerLimits:
    """The front end's limits the settings ask for."""
    return ServerLimits(
        handshake_timeout=s.tls_handshake_timeout,
        header_timeout=s.request_header_timeout,
        idle_timeout=s.idle_timeout,
        unprivileged_idle_timeout=min(s.idle_timeout, s.unauthenticated_idle_timeout),
        write_timeout=s.write_timeout,
        backlog=_BACKLOG,
        admission=AdmissionLimits(
            max_connections=s.max_connections,
            reserved=min(s.reserved_connections, s.max_connections - 1),
            max_per_peer=s.max_connections_per_peer,
        ),
        head=HeadLimits(max_bytes=s.max_header_bytes),
    )


def status_body(code: int, reason: str, message: str) -> bytes:
    """A ``metav1.Status`` failure as JSON bytes."""
    return json.dumps(wire.status(code, reason, message), separators=(",", ":")).encode()


def status_response(code: int, reason: str, message: str, close: bool = False) -> Response:
    """A ``metav1.Status`` failure as a response."""
    body = status_body(code, reason, message)
    return Response(code, [("Content-Type", "application/json")], body, close=close)


class _Busy(Exception):
    """The app threads have ``max_inflight`` requests already (answered 429)."""


@dataclass
class _Unfinished:
    """An answer past the buffering limit with no Content-Length: the rest is streamed."""

    status: int
    headers: list[tuple[str, str]]
    pending: list[bytes]
    rest: Iterator[bytes]
    result: Iterable[bytes]


def _never(environ: dict[str, Any]) -> bool:
    return False


def _close_result(result: Iterable[bytes]) -> None:
    closer = getattr(result, "close", None)
    if closer is not None:
        closer()


def _internal_error() -> Response:
    return status_response(500, "InternalError", "an internal error occurred", True)


def _next_batch(rest: Iterator[bytes]) -> bytes:
    """The next ``_STREAM_AFTER`` bytes or so of a streamed answer (b"": the end)."""
    batch: list[bytes] = []
    size = 0
    for chunk in rest:
        if chunk:
            batch.append(chunk)
            size += len(chunk)
        if size >= _STREAM_AFTER:
            break
    return b"".join(batch)


class WsgiHandler:
    """Serves a WSGI app behind :class:`edl_common.http.server.HttpServer`.

    The adapter's app (:func:`~metrics_adapter.api.flask_app.create_app`) has its request
    filters in ``app.extensions``: they run on the event loop itself (no hand-off to a thread
    and back, which was most of a small request's cost) and, where a review must be asked of
    kube-apiserver, again on an app thread; then the app runs once, on the loop when it says
    it never blocks (``INLINE_EXTENSION``) and the request is not one it renders off the loop
    (``OFF_LOOP_EXTENSION``: the whole ``/metrics`` page), else on a thread. An answer too
    large to buffer is
    streamed, pulled from an app thread. Any other WSGI app runs on the threads unless it
    says it never blocks.

    Args:
        app: the WSGI application.
        threads: app threads.
        max_inflight: requests queued or running on the threads at most (more: 429).
        scheme: ``http`` or ``https`` (``wsgi.url_scheme``).
        server: ``(name, port)`` for ``SERVER_NAME``/``SERVER_PORT``.
        log_access: write one access-log line per request.
    """

    def __init__(
        self,
        app: WsgiApp,
        threads: int,
        max_inflight: int,
        scheme: str,
        server: tuple[str, str] = ("localhost", "0"),
        log_access: bool = False,
    ) -> None:
        extensions = getattr(app, "extensions", {})
        self._filters: RequestFilters | None = extensions.get(FILTERS_EXTENSION)
        # With filters, the app proper is what they guard: they run apart, before it.
        self._app: WsgiApp = self._filters.app if self._filters is not None else app
        self._inline = bool(extensions.get(INLINE_EXTENSION))
        self._off_loop: Callable[[dict[str, Any]], bool] = extensions.get(
            OFF_LOOP_EXTENSION, _never
        )
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="http")
        self._max_inflight = max_inflight
        self._scheme = scheme
        self._server = server
        self._log_access = log_access
        self._inflight = 0

    def close(self) -> None:
        """Stop the app threads (queued work is dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def respond(self, request: Request) -> Response:
        """Filter, then answer: on the loop when possible, else (or to wait) on a thread.

        The filters (authentication, authorisation) run on the loop and, where they would
        wait on the network, again on a thread; the app then runs once: on the loop when it
        says it never blocks, else on a thread.
        """
        head = request.head
        environ = self._environ(request)
        try:
            denial = await self._filter(environ)
            if denial is not None:
                return self._answered(denial, environ)
            answer: Response | _Unfinished
            if self._inline and not self._off_loop(environ):
                with on_loop():
                    answer = self._run_app(environ, head)
            else:
                answer = await self._on_thread(self._run_app, environ, head)
        except _Busy:
            return status_response(
                429, "TooManyRequests", "too many requests in flight, please retry"
            )
        if isinstance(answer, _Unfinished):
            return self._answered(
                Response(answer.status, answer.headers, self._stream(answer)), environ
            )
        return self._answered(answer, environ)

    async def screen(self, request: Request) -> Response | None:
        """Read a request body only for a client the filters authenticated and allowed.

        The API is read-only (GET and HEAD), so no one needs to send a body; a stranger's
        is refused before it is read and before ``100 Continue`` (600 slow bodies from
        unauthenticated clients held 430 MB, issue 37). The filters' own denial (401, 403)
        is the answer where they give one.
        """
        environ = self._environ(request)
        try:
            denial = await self._filter(environ)
        except _Busy:
            denial = status_response(
                429, "TooManyRequests", "too many requests in flight, please retry"
            )
        if denial is None and environ.get(USER_ENVIRON_KEY) in (None, ANONYMOUS.name):
            denial = status_response(
                401, "Unauthorized", "a request body is accepted only from an authenticated client"
            )
        if denial is None:
            return None
        denial.close = True
        return self._answered(denial, environ)

    async def _filter(self, environ: dict[str, Any]) -> Response | None:
        """Authenticate and authorise: on the loop, else (to wait on a review) on a thread.

        Raises:
            _Busy: the review would wait, and the threads are full.
        """
        if self._filters is None:
            return None
        try:
            with on_loop():
                denial = self._filters.admit(environ)
        except WouldBlock:  # an uncached review: a thread waits for it
            denial = await self._on_thread(self._filters.admit, environ)
        if denial is None:
            return None
        return Response(denial.code, denial.headers, denial.body)

    async def _on_thread(self, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)`` on an app thread.

        Raises:
            _Busy: ``max_inflight`` calls are queued or running there already.
        """
        if self._inflight >= self._max_inflight:
            raise _Busy()
        self._inflight += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, call, *args)
        finally:
            self._inflight -= 1

    @staticmethod
    def _answered(response: Response, environ: dict[str, Any]) -> Response:
        response.note["user"] = str(environ.get(USER_ENVIRON_KEY) or "-")
        return response

    def refuse(self, error: HttpError) -> Response:
        """An error of the HTTP layer as a ``metav1.Status``."""
        return status_response(error.code, error.reason, error.message)

    def finished(self, exchange: Exchange) -> None:
        """One access-log line (when asked for), naming the authenticated user."""
        if not self._log_access:
            return
        head = exchange.head
        line = f"{head.method} {head.target} {head.version}" if head else "-"
        accept = (head.first("accept") if head else None) or "-"
        agent = (head.first("user-agent") if head else None) or "-"
        access_log.info(
            '%s "%s" %d %s %dms user="%s" accept="%s" agent="%s"',
            exchange.connection.peer[0],
            _escape(line),
            exchange.response.status,
            exchange.sent or "-",
            int(exchange.seconds * 1000),
            _escape(exchange.response.note.get("user", "-")),
            _escape(accept),
            _escape(agent),
        )

    async def _stream(self, answer: _Unfinished) -> AsyncIterator[bytes]:
        """The rest of a large answer, pulled from an app thread batch by batch."""
        loop = asyncio.get_running_loop()
        try:
            yield b"".join(answer.pending)
            for _ in range(1 << 40):  # bounded by the answer's size
                batch = await loop.run_in_executor(self._pool, _next_batch, answer.rest)
                if not batch:
                    return
                yield batch
        finally:
            try:
                await loop.run_in_executor(self._pool, _close_result, answer.result)
            except Exception:
                log.exception("closing a streamed answer failed")

    def _environ(self, request: Request) -> dict[str, Any]:
        head = request.head
        conn = request.connection
        environ: dict[str, Any] = {
            "REQUEST_METHOD": head.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(head.path).decode("latin-1"),
            "QUERY_STRING": head.query,
            "RAW_URI": head.target,
            "REQUEST_URI": head.target,
            "SERVER_PROTOCOL": head.version,
            "SERVER_NAME": self._server[0],
            "SERVER_PORT": self._server[1],
            "REMOTE_ADDR": conn.peer[0],
            "REMOTE_PORT": str(conn.peer[1]),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": self._scheme,
            "wsgi.input": io.BytesIO(request.body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            PEER_CERT_ENVIRON_KEY: conn.peer_cert_der,
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

    def _run_app(self, environ: dict[str, Any], head: RequestHead) -> Response | _Unfinished:
        """Call the app and buffer its answer, up to the point where it must be streamed."""
        head_only = head.method == "HEAD"
        started: list[Any] = []
        pending: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            started[:] = [status, list(headers)]
            return lambda data: pending.append(data)

        try:
            result = self._app(environ, start_response)
        except Exception:
            log.exception("internal error serving %s %s", head.method, head.target)
            return _internal_error()
        unfinished = False
        try:
            iterator = iter(result)
            size = sum(len(p) for p in pending)
            for chunk in iterator:
                if not chunk:
                    continue
                pending.append(chunk)
                size += len(chunk)
                if size > _STREAM_AFTER and not head_only and _unsized(started):
                    unfinished = True
                    status, headers = started
                    return _Unfinished(
                        int(status.split(" ", 1)[0]),
                        _end_to_end(headers),
                        pending,
                        iterator,
                        result,
                    )
        except Exception:
            log.exception("internal error rendering %s %s", head.method, head.target)
            return _internal_error()
        finally:
            if not unfinished:
                _close_result(result)
        if not started:
            log.error("the app answered %s %s without start_response", head.method, head.target)
            return _internal_error()
        status, headers = started
        return Response(int(status.split(" ", 1)[0]), _end_to_end(headers), b"".join(pending))


def _unsized(started: list[Any]) -> bool:
    return bool(started) and not any(k.lower() == "content-length" for k, _ in started[1])


def _end_to_end(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The app's headers without hop-by-hop ones (the front end frames the connection)."""
    return [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def bind(host: str, port: int, backlog: int = _BACKLOG) -> socket.socket:
    """A listening TCP socket on ``host:port``.

    Raises:
        ConfigError: the address cannot be bound (in use, not local, no permission).
    """
    try:
        return listen(host, port, backlog)
    except ListenError as e:
        raise ConfigError(str(e)) from e


class AdapterServer:
    """Runs the app built by ``app_factory`` behind :class:`HttpServer` until SIGTERM/SIGINT.

    ``after_load`` runs once the app is built (the entry point tunes the process's memory
    there: :mod:`metrics_adapter.process_memory`); ``memory`` is the budget admission keeps to
    (the entry point's, from ``--memory-budget`` or the container's limit).
    """

    def __init__(
        self,
        settings: AdapterSettings,
        app_factory: Callable[[], WsgiApp],
        cert: ServingCert | None,
        context_factory: Callable[[], ssl.SSLContext] | None,
        after_load: Callable[[], object] = lambda: None,
        memory: MemoryBudget | None = None,
    ) -> None:
        self._settings = settings
        self._after_load = after_load
        self._memory = memory
        self._app_factory = app_factory
        self._cert = cert
        self._context_factory = context_factory

    def load(self) -> WsgiApp:
        """Build the app (and start its background work), then call ``after_load``."""
        app = self._app_factory()
        self._after_load()
        return app

    def run(self) -> None:
        """Bind, build the app, serve until terminated; a generated temporary cert is removed."""
        s = self._settings
        limits = server_limits(s)
        try:
            sock = bind(s.host, s.port, limits.backlog)
            raise_open_files_limit(limits.admission.max_connections + 256)
            context = self._context_factory() if self._context_factory else None
            app = self.load()
            name = sock.getsockname()
            handler = WsgiHandler(
                app,
                s.threads,
                max(s.threads, s.max_requests_inflight),
                "https" if context is not None else "http",
                (str(name[0]), str(name[1])),
                s.access_log,
            )
            front = HttpServer(handler, limits, context, memory=self._memory)
            reloader = (
                CertReloader(self._cert, context)
                if self._cert is not None and context is not None
                else None
            )
            log.info("serving on %s:%d (%s)", s.host, name[1], front.scheme)
            try:
                asyncio.run(self._main(front, sock, reloader))
            finally:
                handler.close()
        finally:
            if self._cert is not None:
                self._cert.cleanup()

    async def _main(
        self, front: HttpServer, sock: socket.socket, reloader: CertReloader | None
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
