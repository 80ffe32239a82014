"""One connection's bytes for the front end: bounded buffers, TLS, and a teardown that frees.

Why not asyncio's streams (``StreamReader``/``StreamWriter``), which the front end used before:

* asyncio gives every TLS connection a 256 KiB read buffer from accept on
  (``asyncio.sslproto.SSLProtocol.max_size``), and lets 256 KiB of ciphertext and 512 KiB of
  unsent answers pile up per connection: 1,500 half-open ClientHellos took the adapter from
  242 to 619 MB. Here TLS is asyncio's own ``SSLProtocol`` with a 16 KiB read buffer (a
  record longer than one read waits in OpenSSL's input; requests are small) and 64 KiB for
  each of the other two.
* A connection whose TLS handshake fails never tells the streams' protocol it was lost, so
  its task, reader, writer and callbacks stayed in reference cycles until the cyclic
  collector ran (rarely, in the adapter). :meth:`Channel.release` drops every reference a
  connection holds when its task ends, and the transports' own cycles are cut when they
  close, so reference counting frees a closed connection at once.

Both lean on asyncio internals of CPython 3.11-3.13 (``SSLProtocol``'s buffer setters and
read buffer, a selector transport's read callback):
tests/unit/edl_common/http/test_asyncio_internals.py fails, naming the attribute, on a Python
that moved them. They retire when ``loop.start_tls`` lets a server size its TLS buffers and
aborted transports no longer keep themselves alive.

A :class:`Channel` is the protocol of one accepted connection (and, after
:meth:`Channel.start_tls`, the TLS layer's application protocol). It keeps what arrived in one
buffer (reading paused above ``high_water``), writes with drain, and starts the connection's
task when the connection is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import traceback
from asyncio import sslproto
from collections.abc import Callable, Coroutine
from typing import Any, cast

TLS_READ_SIZE = 16 * 1024
"""Bytes one TLS read takes from the socket (asyncio's default: 256 KiB per connection)."""
TLS_BUFFER_HIGH_WATER = 64 * 1024
"""Ciphertext received but not yet decrypted, and answers not yet encrypted, at most before
reading from the socket (or the front end's writing) pauses (asyncio: 256 and 512 KiB)."""
TLS_CONNECTION_BYTES = TLS_READ_SIZE + 64 * 1024
"""What an open TLS connection costs, about: its read buffer, OpenSSL's state and the
connection's objects (500 handshaking or idle connections: 78-88 KB each, measured)."""
PLAIN_CONNECTION_BYTES = 16 * 1024
"""What an open plain-HTTP connection costs, about."""


class _ServerTls(sslproto.SSLProtocol):
    """asyncio's TLS state machine with buffers sized for a server of many connections."""

    max_size = TLS_READ_SIZE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        state: Any = self  # asyncio's own limits setters (not in typeshed's stub)
        state._set_read_buffer_limits(high=TLS_BUFFER_HIGH_WATER)
        state._set_write_buffer_limits(high=TLS_BUFFER_HIGH_WATER)

    def release(self) -> None:
        """Drop the read buffer: the connection is over.

        asyncio clears the rest itself when the socket's loss reaches this protocol.
        """
        self._ssl_buffer = bytearray()
        self._ssl_buffer_view = memoryview(self._ssl_buffer)


def _unlink(transport: asyncio.BaseTransport) -> None:
    """Cut an aborted socket transport's reference to itself.

    asyncio's selector transport keeps a bound method of itself as its read callback, so
    every closed transport (its socket object and extra info) waits for the cyclic collector.
    Once aborted it is out of the selector; a read already queued for this pass of the loop
    finds the transport lost and returns, and gets a callback that does nothing here.
    """
    held = cast(Any, transport)
    if hasattr(held, "_read_ready_cb"):
        held._read_ready_cb = _nothing


def _nothing() -> None:
    """The read callback of an aborted transport."""


class Channel(asyncio.Protocol):
    """One connection's protocol: buffered input, writes with drain, an optional TLS layer.

    Args:
        on_open: the connection's coroutine, started as a task when the connection is made.
        tls: the connection will be upgraded with :meth:`start_tls` (reading waits for it).
        high_water: received bytes kept before reading from the socket pauses.
    """

    def __init__(
        self,
        on_open: Callable[[Channel], Coroutine[Any, Any, None]],
        tls: bool,
        high_water: int,
    ) -> None:
        self._on_open: Callable[[Channel], Coroutine[Any, Any, None]] | None = on_open
        self._tls_expected = tls
        self._high_water = high_water
        self._transport: asyncio.Transport | None = None
        self._raw: asyncio.Transport | None = None
        self._tls: _ServerTls | None = None
        self._buffer = bytearray()
        self._eof = False
        self._lost = False
        self._error: BaseException | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._data_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._closed_waiter: asyncio.Future[None] | None = None
        self._tail = b""
        self.task: asyncio.Task[None] | None = None
        """The connection's task (from the connection made until :meth:`release`)."""
        self.on_head: Callable[[], None] | None = None
        """Called when a complete request head has arrived (decrypted, under TLS), before
        the connection's task reads it."""

    # ------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The socket's connection (start the task), or the TLS layer's, after its handshake."""
        self._transport = cast(asyncio.Transport, transport)
        if self._raw is not None:
            return  # the TLS layer, after its handshake: start_tls is waiting for it
        self._raw = self._transport
        if self._tls_expected:
            self._raw.pause_reading()  # the first bytes are the TLS layer's, once it exists
        if self._on_open is not None:
            self.task = asyncio.get_running_loop().create_task(self._on_open(self))
            self._on_open = None

    def data_received(self, data: bytes) -> None:
        """Keep the bytes; a complete head marks the connection busy before it is read.

        Until its task reads them, a request whose head already arrived would look like a
        fresh idle connection, and a storm of newcomers could close it for room.
        """
        transport = self._transport
        if transport is None:
            return  # released: the connection is over
        self._buffer += data
        if self.on_head is not None:
            if b"\r\n\r\n" in self._tail + data:
                self.on_head()
                self._tail = b""
            else:
                self._tail = data[-3:]
        if len(self._buffer) > self._high_water and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        _wake(self._data_waiter)

    def eof_received(self) -> bool:
        """The client sent its last byte; plain HTTP keeps the writing half open for the answer.

        Over TLS a protocol that asks to stay half-open makes asyncio log ``returning true
        from eof_received() has no effect when using ssl`` for every such client.
        """
        self._eof = True
        _wake(self._data_waiter)
        return not self._tls_expected

    def connection_lost(self, exc: Exception | None) -> None:
        """Wake whoever waits; the error is kept (frames cleared) for the next read."""
        self._lost = True
        if exc is not None:
            forget_frames(exc)
            self._error = exc
        self._eof = True
        _wake(self._data_waiter)
        _wake(self._drain_waiter)
        _wake(self._closed_waiter)
        self.on_head = None

    def pause_writing(self) -> None:
        """The transport holds enough unsent bytes: :meth:`drain` waits."""
        self._writing_paused = True

    def resume_writing(self) -> None:
        """The transport took what it held: :meth:`drain` returns."""
        self._writing_paused = False
        _wake(self._drain_waiter)

    # ------------------------------------------------------------ the connection's side

    def extra(self, name: str) -> Any:
        """The transport's extra info (``peername``, ``ssl_object``...), or None."""
        transport = self._transport
        return transport.get_extra_info(name) if transport is not None else None

    async def start_tls(self, context: ssl.SSLContext, handshake_timeout: float) -> None:
        """Run the server side of a TLS handshake; afterwards reads and writes are TLS.

        The same steps as ``loop.start_tls``, with :class:`_ServerTls` for its buffers.

        Raises:
            ssl.SSLError, OSError, TimeoutError, ConnectionError: the handshake failed.
        """
        raw = self._raw
        assert raw is not None and self._tls is None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._tls = _ServerTls(
            loop,
            self,
            context,
            waiter,
            server_side=True,
            ssl_handshake_timeout=handshake_timeout,
            call_connection_made=True,
        )
        raw.set_protocol(self._tls)
        made = loop.call_soon(self._tls.connection_made, raw)
        resume = loop.call_soon(raw.resume_reading)
        try:
            await waiter
        except BaseException:
            raw.close()
            made.cancel()
            resume.cancel()
            raise

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes that arrived (waiting for some); b"" at the end.

        Raises:
            OSError, ssl.SSLError: the connection failed (a reset, a bad TLS record).
        """
        if not self._buffer and not self._eof:
            waiter = self._data_waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._data_waiter = None
        if not self._buffer:
            if self._error is not None:
                raise self._error
            return b""
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        if self._reading_paused and len(self._buffer) <= self._high_water // 4:
            self._reading_paused = False
            if self._transport is not None and not self._lost:
                self._transport.resume_reading()
        return data

    def write(self, data: bytes) -> None:
        """Queue ``data`` (a no-op once the connection is gone)."""
        if self._transport is not None and not self._lost:
            self._transport.write(data)

    async def drain(self) -> None:
        """Wait until the queued answer is below the transport's high-water mark.

        Raises:
            ConnectionResetError: the connection is gone.
        """
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        waiter = self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._drain_waiter = None
        if self._lost:
            raise ConnectionResetError("connection lost")

    async def close(self, timeout: float) -> None:
        """Close after what is queued is sent (TLS: with close_notify), within ``timeout``."""
        transport = self._transport
        if transport is None or self._lost:
            return
        transport.close()
        waiter = self._closed_waiter = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await waiter
        self._closed_waiter = None

    def abort(self) -> None:
        """Drop the connection now (a no-op when it is gone)."""
        for transport in (self._transport, self._raw):  # the socket's too, after a failed handshake
            if transport is not None:
                transport.abort()

    def release(self) -> None:
        """Abort, and drop every reference this connection holds.

        Reference counting then frees it once asyncio has delivered the loss (the next pass
        of the loop). Called when the connection's task ends: a TLS layer whose handshake
        failed never reports the loss to this protocol, so nothing else would.
        """
        self.abort()
        if self._tls is not None:
            self._tls.release()
        if self._raw is not None:
            _unlink(self._raw)
        if self._error is not None:
            forget_frames(self._error)
        self._error = None
        self._buffer = bytearray()
        self._tls = None
        self._transport = None
        self._raw = None
        self.task = None
        self.on_head = None
        self._on_open = None


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def forget_frames(error: BaseException) -> None:
    """Lets a connection's failure be freed at once instead of by the cyclic collector.

    A failed TLS handshake (a client that connects and closes, a reset) raises out of the
    handshake's wait, whose finished frame holds the waiter future that holds the error,
    whose traceback holds that frame: a reference cycle that keeps the connection's TLS
    state alive until a collection finds it. With the collector's first threshold raised
    (the adapter's `process_memory`) and its older generations rarely collected, a burst of
    1,000 such connects a second held over 2 GB within 15 s. Clearing the finished frames of
    the error's chain breaks every such cycle.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    for _ in range(16):  # the chain of causes and contexts, bounded
        if current is None or id(current) in seen:
            return
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)  # skips frames still running
            current.__traceback__ = None
        current = current.__cause__ or current.__context__
