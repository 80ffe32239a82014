"""An asyncio HTTP/1.1 server on h11: one event loop owns every connection, each with deadlines.

Why not a thread per connection (gunicorn's gthread, ``http.server``): a handful of idle or
half-open connections took every thread. Here waiting costs a few KB: the TLS handshake, a
request head, a body and idle keep-alive each have a deadline, the admission table
(:mod:`edl_common.http.admission`) decides who may stay when the room (connections, memory:
:mod:`edl_common.http.memory`) is full, connections take turns at being answered
(:mod:`edl_common.http.fairness`), and only complete, parsed requests reach the handler. h11
parses requests and frames their bodies; :mod:`edl_common.http.request_head` refuses what
h11 is too lenient about, and :mod:`edl_common.http.response_head` writes the answers. Each
connection's bytes go through a :class:`~edl_common.http.channel.Channel` (bounded buffers,
TLS, freed when it closes).

The handler is framework-free: it gets a :class:`Request` and returns a :class:`Response`
(a body of bytes, or an async iterator that is streamed chunked), screens a request that
carries a body before any of it is read (``100 Continue`` is sent only after), and renders
errors of the HTTP layer itself in its own format (the adapter: a Kubernetes ``Status``; the
agent: text).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import h11

from edl_common.http.admission import Admission, AdmissionLimits, Phase, Tracked
from edl_common.http.channel import (
    PLAIN_CONNECTION_BYTES,
    TLS_CONNECTION_BYTES,
    Channel,
    forget_frames,
)
from edl_common.http.fairness import FairnessLimits, Turn, TurnTaking
from edl_common.http.memory import MemoryBudget
from edl_common.http.request_head import (
    HeadLimits,
    HttpError,
    RequestHead,
    bad_request,
    oversize_error,
    skip_empty_lines,
    start_request,
)
from edl_common.http.response_head import (
    LAST_CHUNK,
    HttpDate,
    InvalidResponseError,
    chunk,
    response_head,
)

log = logging.getLogger(__name__)

_READ_SIZE = 65536
_LINGER_S = 0.5  # after an error, unread input is drained this long before the close
_LINGER_BYTES = 256 * 1024
_DRAIN_S = 5.0  # on stop, requests being served get this long to finish
_ACCEPT_BATCH = 32  # connections accepted in one pass of the event loop


@dataclass(frozen=True)
class ServerLimits:
    """Deadlines, sizes and caps that keep slow or hostile clients from starving the server."""

    handshake_timeout: float = 10.0
    """Seconds a TLS handshake may take (from accept)."""
    header_timeout: float = 10.0
    """Seconds from a request's first byte (or the handshake) to the end of its head; also
    the time its body may take."""
    idle_timeout: float = 90.0
    """Seconds a privileged keep-alive connection may wait for its next request."""
    unprivileged_idle_timeout: float | None = None
    """The same for every other connection (None: ``idle_timeout``)."""
    write_timeout: float = 30.0
    """Seconds a response may take to be taken by the client."""
    max_body: int = 65536
    """Largest request body read; larger is 413."""
    backlog: int = 1024
    """Listen backlog (connects the kernel completes before the loop accepts them)."""
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    head: HeadLimits = field(default_factory=HeadLimits)
    fairness: FairnessLimits = field(default_factory=FairnessLimits)


@dataclass(frozen=True)
class ConnectionInfo:
    """What is known about the connection a request came on."""

    peer: tuple[str, int]
    scheme: str
    peer_cert_der: bytes | None
    """The client certificate (DER) presented in the TLS handshake, if any."""
    privileged: bool
    """The TLS context verified the client's certificate."""


@dataclass(frozen=True)
class Request:
    """A complete request: its head, its body, its connection."""

    head: RequestHead
    body: bytes
    connection: ConnectionInfo


@dataclass
class Response:
    """What to answer. A bytes body gets a Content-Length; an async iterator goes out chunked."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | AsyncIterator[bytes] = b""
    close: bool = False
    """Close the connection after this answer."""
    note: dict[str, str] = field(default_factory=dict)
    """Whatever the handler wants back in :meth:`Handler.finished` (e.g. the user served)."""


@dataclass(frozen=True)
class Exchange:
    """One answered request, for access logs."""

    connection: ConnectionInfo
    head: RequestHead | None
    """None: the head itself was refused."""
    response: Response
    sent: int
    """Bytes written (0 when the client went away first)."""
    seconds: float


class Handler(Protocol):
    """Answers requests; renders the HTTP layer's own errors in the protocol's format."""

    async def respond(self, request: Request) -> Response:
        """The answer to a complete request (raise nothing: an exception is a 500)."""
        ...

    async def screen(self, request: Request) -> Response | None:
        """Look at a request that carries a body before any of it is read.

        The request's ``body`` is empty. An answer refuses it (the body is never read,
        ``100 Continue`` never sent, the connection is closed after the answer); None reads
        the body, then :meth:`respond` answers (raise nothing: an exception refuses it with a
        500).
        """
        ...

    def refuse(self, error: HttpError) -> Response:
        """The answer to a request the HTTP layer refused (``error.code`` is the status)."""
        ...

    def finished(self, exchange: Exchange) -> None:
        """Called after each answer (access logs)."""
        ...


class _Closed(Exception):
    """The connection ended (or idled out) between requests: close without an answer."""


class _Refused(Exception):
    """A request refused before its body was read (:meth:`Handler.screen`)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _verified_certificate(ssl_object: ssl.SSLObject | None) -> bool:
    """Privileged: a client certificate that the TLS context verified against its CAs."""
    return ssl_object is not None and bool(ssl_object.getpeercert())


class HttpServer:
    """Serves ``handler`` over HTTP/1.1 (optionally TLS) from the running event loop.

    Args:
        handler: answers requests and renders errors.
        limits: deadlines, sizes, caps.
        context: the TLS server context (None: plain HTTP).
        privileged: decides from the TLS connection whether it may use the reserved room
            (default: a verified client certificate).
        memory: the memory budget admission keeps to (None: connections and bodies are
            capped by count and size only).
    """

    def __init__(
        self,
        handler: Handler,
        limits: ServerLimits,
        context: ssl.SSLContext | None = None,
        privileged: Callable[[ssl.SSLObject | None], bool] = _verified_certificate,
        memory: MemoryBudget | None = None,
    ) -> None:
        self._handler = handler
        self.limits = limits
        self._context = context
        self._privileged = privileged
        self._memory = memory
        self.scheme = "https" if context is not None else "http"
        self._admission: Admission | None = None
        self._turns = TurnTaking(limits.fairness)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._refusal_logged = -60.0
        self._date = HttpDate()

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        return self._admission.open if self._admission is not None else 0

    @property
    def refused_connections(self) -> int:
        """Connections closed at once because no room could be made."""
        return self._admission.refused if self._admission is not None else 0

    @property
    def evicted_connections(self) -> int:
        """Idle or slow connections closed to make room for newer ones."""
        return self._admission.evicted if self._admission is not None else 0

    @property
    def turns(self) -> TurnTaking:
        """The turn-taking of connections (its counters)."""
        return self._turns

    async def serve(self, sock: socket.socket, stop: asyncio.Event) -> None:
        """Serve on the bound socket until ``stop`` is set, then drain gracefully."""
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_exception_handler)
        admission = self._admission = Admission(self.limits.admission, loop.time, self._memory)
        tls = self._context is not None

        def protocol() -> Channel:
            return Channel(self._accepted, tls, _READ_SIZE)

        # asyncio accepts as many connections in one pass of the loop as the backlog it is
        # given, and listens again with it: a small batch, then the kernel's queue as asked
        # (1,024 accepts in one pass, each closing another connection for room, held the
        # loop for most of a second while half-open handshakes were re-opened).
        server = await loop.create_server(protocol, sock=sock, backlog=_ACCEPT_BATCH)
        sock.listen(self.limits.backlog)
        try:
            await stop.wait()
        finally:
            server.close()
            deadline = loop.time() + _DRAIN_S
            while admission.serving() and loop.time() < deadline:
                await asyncio.sleep(0.05)
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=2.0)

    async def _accepted(self, channel: Channel) -> None:
        task = asyncio.current_task()
        assert task is not None and self._admission is not None
        admission = self._admission
        peer = channel.extra("peername") or ("", 0)
        tls = self._context is not None
        phase = Phase.HANDSHAKE if tls else Phase.WAITING
        cost = TLS_CONNECTION_BYTES if tls else PLAIN_CONNECTION_BYTES
        conn = admission.accept(str(peer[0]), phase, functools.partial(_cancel, task), cost)
        if conn is None:
            self._log_refusal()
            channel.release()
            return
        channel.on_head = functools.partial(_head_arrived, admission, conn)
        self._tasks.add(task)
        try:
            info = await self._handshake(channel, conn, peer)
            if info is None:
                self._log_refusal()
                return
            await self._serve(channel, conn, info)
            await channel.close(2.0)  # flushes what is still buffered (drain stops at high water)
        except (OSError, ssl.SSLError, EOFError, _Closed) as e:
            forget_frames(e)
        except asyncio.CancelledError as e:  # evicted, or the server stops
            forget_frames(e)
        except h11.LocalProtocolError:  # an answer h11 cannot frame: ours, not the client's
            log.exception("a response could not be framed; the connection is closed")
        finally:
            admission.leave(conn)
            self._tasks.discard(task)
            channel.release()  # aborts (a no-op after a clean close) and frees

    async def _handshake(self, channel: Channel, conn: Tracked, peer: Any) -> ConnectionInfo | None:
        assert self._admission is not None
        address = (str(peer[0]), int(peer[1]) if len(peer) > 1 else 0)
        if self._context is None:
            return ConnectionInfo(address, "http", None, False)
        await channel.start_tls(self._context, self.limits.handshake_timeout)
        ssl_object = channel.extra("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
        privileged = self._privileged(ssl_object)
        if not self._admission.classify(conn, privileged):
            return None
        self._admission.enter(conn, Phase.WAITING)
        return ConnectionInfo(address, "https", der, privileged)

    def _log_refusal(self) -> None:
        now = time.monotonic()
        if now - self._refusal_logged >= 60.0:
            self._refusal_logged = now
            caps = self.limits.admission
            memory = self._memory
            log.warning(
                "connections at their cap (%d in all, %d reserved for privileged clients, "
                "%s per peer, memory %s) and none idle to close: closing new ones "
                "(%d so far, %d of them for memory; logged at most once a minute)",
                caps.max_connections,
                caps.reserved,
                caps.max_per_peer if caps.max_per_peer is not None else "no cap",
                f"{memory.high_water >> 20} MiB of {memory.limit >> 20} MiB"
                if memory is not None
                else "not capped",
                self.refused_connections,
                self._admission.short_of_memory if self._admission is not None else 0,
            )

    async def _serve(self, channel: Channel, conn: Tracked, info: ConnectionInfo) -> None:
        assert self._admission is not None
        admission = self._admission
        turn = Turn(info.peer[0], info.privileged)
        queued = functools.partial(admission.enter, conn, Phase.QUEUED)
        buf = bytearray()
        first = True
        for _ in range(1_000_000):  # requests per connection, bounded
            admission.enter(conn, Phase.WAITING)
            started = time.perf_counter()
            head: RequestHead | None = None
            charged = 0
            turn_started = 0.0
            try:
                head, exchange = await self._read_head(channel, buf, first, conn, info)
                # a pipelined request waits here while others have their turn
                await self._turns.take(turn, queued)
                admission.enter(conn, Phase.SERVING)
                started = time.perf_counter()  # the access log times the request, not the idle
                turn_started = time.thread_time()  # the loop's CPU, not the clock's time
                charged = await self._admit_body(conn, head, info)
                body = await self._read_body(channel, exchange, head, buf)
            except HttpError as e:
                admission.discharge(conn, charged)
                response = self._handler.refuse(e)
                await self._refuse(channel, response, head, info, started)
                return
            except _Refused as e:
                admission.discharge(conn, charged)
                await self._refuse(channel, e.response, head, info, started)
                return
            first = False
            try:
                response = await self._handler.respond(Request(head, body, info))
            except Exception:
                log.exception("internal error serving %s %s", head.method, head.target)
                response = self._handler.refuse(
                    HttpError(500, "InternalError", "an internal error occurred")
                )
                response.close = True
            del body
            admission.discharge(conn, charged)
            sent, keep_open = await self._send(channel, head, response)
            self._turns.spent(turn, time.thread_time() - turn_started)
            self._finished(info, head, response, sent, started)
            if not keep_open:
                return  # Connection: close, HTTP/1.0, a failed stream

    async def _refuse(
        self,
        channel: Channel,
        response: Response,
        head: RequestHead | None,
        info: ConnectionInfo,
        started: float,
    ) -> None:
        """Answer a refused request, then drain a little and let the connection close."""
        response.close = True
        sent = await self._send_plain(channel, response, head)
        self._finished(info, head, response, sent, started)
        await self._linger(channel)

    async def _admit_body(self, conn: Tracked, head: RequestHead, info: ConnectionInfo) -> int:
        """Screen a request that carries a body and charge its memory; the bytes charged.

        Raises:
            HttpError: 413 (too large), 429 (no memory for it now), 500 (the screen failed).
            _Refused: the handler refused it.
        """
        assert self._admission is not None
        if not head.chunked and head.content_length == 0:
            return 0
        limit = self.limits.max_body
        if head.content_length > limit:
            raise HttpError(413, "RequestEntityTooLarge", f"request body larger than {limit} bytes")
        try:
            refusal = await self._handler.screen(Request(head, b"", info))
        except Exception:
            log.exception("internal error screening %s %s", head.method, head.target)
            raise HttpError(500, "InternalError", "an internal error occurred") from None
        if refusal is not None:
            raise _Refused(refusal)
        size = limit if head.chunked else head.content_length
        if not self._admission.charge_body(conn, size):
            raise HttpError(
                429, "TooManyRequests", "no memory for a request body now, please retry"
            )
        return size

    def _finished(
        self,
        info: ConnectionInfo,
        head: RequestHead | None,
        response: Response,
        sent: int,
        started: float,
    ) -> None:
        seconds = time.perf_counter() - started
        try:
            self._handler.finished(Exchange(info, head, response, sent, seconds))
        except Exception:
            log.exception("the access log failed")

    async def _read_head(
        self,
        channel: Channel,
        buf: bytearray,
        first: bool,
        conn: Tracked,
        info: ConnectionInfo,
    ) -> tuple[RequestHead, h11.Connection]:
        """The next request's head; what follows it stays in ``buf``."""
        assert self._admission is not None
        loop = asyncio.get_running_loop()
        limits = self.limits
        idle = limits.idle_timeout
        if not info.privileged and limits.unprivileged_idle_timeout is not None:
            idle = limits.unprivileged_idle_timeout
        started = bool(buf)
        if started:
            self._admission.enter(conn, Phase.READING)
        deadline = loop.time() + (limits.header_timeout if (first or started) else idle)
        scanned = 0
        for _ in range(limits.head.max_bytes + 2):  # at least one byte per read
            skip = skip_empty_lines(buf)
            if skip:
                del buf[:skip]
                scanned = 0
            end = buf.find(b"\r\n\r\n", max(0, scanned - 3))
            if end >= 0:
                data = bytes(buf[:end])
                del buf[: end + 4]  # cheap: a bytearray drops its front without copying
                return start_request(data, b"", limits.head)
            scanned = len(buf)
            error = oversize_error(buf, limits.head)
            if error is not None:
                raise error
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await channel.read(_READ_SIZE)
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
                self._admission.enter(conn, Phase.READING)
                deadline = loop.time() + limits.header_timeout
            buf += chunk
        raise HttpError(431, "RequestHeaderFieldsTooLarge", "request head too large")

    async def _read_body(
        self,
        channel: Channel,
        exchange: h11.Connection,
        head: RequestHead,
        buf: bytearray,
    ) -> bytes:
        """The body of a request :meth:`_admit_body` let through; what follows stays in ``buf``."""
        limit = self.limits.max_body
        if not head.chunked and head.content_length == 0:
            return b""  # nothing to frame: what follows the head is the next request
        if buf:  # what followed the head (h11 takes an empty read for the end)
            exchange.receive_data(bytes(buf))
            buf.clear()
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.header_timeout):
                for _ in range(limit + 2):  # each round takes a byte or ends
                    try:
                        event = exchange.next_event()
                    except h11.RemoteProtocolError as e:
                        raise bad_request(f"malformed request body: {e}") from e
                    if isinstance(event, h11.EndOfMessage):
                        buf += exchange.trailing_data[0]
                        return b"".join(chunks)
                    if isinstance(event, h11.Data):
                        size += len(event.data)
                        if size > limit:
                            raise HttpError(
                                413,
                                "RequestEntityTooLarge",
                                f"request body larger than {limit} bytes",
                            )
                        chunks.append(bytes(event.data))
                        continue
                    if event is h11.NEED_DATA:
                        if exchange.they_are_waiting_for_100_continue:
                            channel.write(
                                exchange.send(
                                    h11.InformationalResponse(status_code=100, headers=[])
                                )
                            )
                        data = await channel.read(_READ_SIZE)
                        if not data:
                            raise bad_request("the connection ended inside the request body")
                        exchange.receive_data(data)
                        continue
                    raise bad_request("malformed request body")
        except TimeoutError:
            raise HttpError(408, "Timeout", "the request body was not received in time") from None
        raise HttpError(413, "RequestEntityTooLarge", f"request body larger than {limit} bytes")

    # ------------------------------------------------------------------ writing

    async def _send(
        self, channel: Channel, head: RequestHead, response: Response
    ) -> tuple[int, bool]:
        """Write ``response``: the bytes sent and whether the connection may stay open."""
        body = response.body
        length = len(body) if isinstance(body, bytes) else None
        try:
            data, framing = response_head(
                response.status,
                response.headers,
                date=self._date.now(),
                method=head.method,
                version=head.version,
                keep_alive=head.keep_alive and not response.close,
                body_length=length,
            )
        except InvalidResponseError:
            log.exception("an invalid response head for %s %s", head.method, head.target)
            error = self._handler.refuse(
                HttpError(500, "InternalError", "an internal error occurred")
            )
            error.close = True
            await _aclose(body)
            return await self._send_plain(channel, error, head), False
        if isinstance(body, bytes):
            if framing.body_allowed:
                data += body
            await self._write(channel, data)
            return len(data), not framing.close
        if not framing.body_allowed:
            await _aclose(body)
            await self._write(channel, data)
            return len(data), not framing.close
        sent = 0
        try:
            # The last chunk goes out with the end of the message in one write: a small
            # final segment of its own waits for the client's delayed ACK (~40 ms a request).
            held = data
            async for piece in body:
                if piece:
                    await self._write(channel, held)
                    sent += len(held)
                    held = chunk(piece) if framing.chunked else piece
            if framing.chunked:
                held += LAST_CHUNK
            await self._write(channel, held)
            sent += len(held)
        except Exception as e:  # the client went away or stopped reading, or the app failed
            log.debug("streamed response aborted: %s", e)
            return sent, False
        finally:
            await _aclose(body)
        return sent, not framing.close

    async def _send_plain(
        self, channel: Channel, response: Response, head: RequestHead | None
    ) -> int:
        """Write an error answer with ``Connection: close`` (the request may be unreadable)."""
        body = response.body if isinstance(response.body, bytes) else b""
        await _aclose(response.body)
        data, framing = response_head(
            response.status,
            response.headers,
            date=self._date.now(),
            method=head.method if head is not None else None,
            version="HTTP/1.1",
            keep_alive=False,
            body_length=len(body),
        )
        if framing.body_allowed:
            data += body
        await self._write(channel, data)
        return len(data)

    async def _write(self, channel: Channel, data: bytes) -> None:
        channel.write(data)
        async with asyncio.timeout(self.limits.write_timeout):
            await channel.drain()

    async def _linger(self, channel: Channel) -> None:
        """Drain unread input briefly, so closing does not reset the answer just sent."""
        taken = 0
        try:
            async with asyncio.timeout(_LINGER_S):
                while taken < _LINGER_BYTES:
                    chunk = await channel.read(_READ_SIZE)
                    if not chunk:
                        return
                    taken += len(chunk)
        except (TimeoutError, OSError):
            return


def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()


def _head_arrived(admission: Admission, conn: Tracked) -> None:
    if conn.phase in (Phase.WAITING, Phase.READING):
        admission.enter(conn, Phase.SERVING)


async def _aclose(body: bytes | AsyncIterator[bytes]) -> None:
    closer = getattr(body, "aclose", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


def _quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Connection-level failures caused by clients are not the server's errors: debug only."""
    exc = context.get("exception")
    if isinstance(exc, OSError | ssl.SSLError | EOFError):
        log.debug("connection error: %s", context.get("message"))
        return
    loop.default_exception_handler(context)
