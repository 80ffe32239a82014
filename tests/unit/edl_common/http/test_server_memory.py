"""A closed connection is freed when it closes, not later by the cyclic garbage collector.

Clients that connect and close before their TLS handshake (or reset it, or send garbage)
once left each connection in reference cycles (the failed handshake's traceback, the
protocol's connect closure, the admission record's task), holding its TLS buffers until a
collection found them: 1,000 such connects a second took the adapter from 75 MB to 2.5 GB in
15 s (its raised collector threshold collects rarely). A handshake that failed or timed out
never told asyncio's stream protocol it was lost, and every socket transport holds a bound
method of itself. Here the collector is off while connections of each kind come and go, so
whatever reference counting does not free stays countable: nothing of the server's may.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import struct
import tempfile
import threading
from asyncio import selector_events, sslproto
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from edl_common.http.admission import AdmissionLimits, Tracked
from edl_common.http.channel import Channel
from edl_common.http.request_head import HttpError
from edl_common.http.server import (
    Exchange,
    HttpServer,
    Request,
    Response,
    ServerLimits,
)
from tests.support.pki import issue, make_ca

pytestmark = pytest.mark.unit


class Ok:
    """Answers every request with 200."""

    async def respond(self, request: Request) -> Response:
        return Response(200, [("Content-Type", "text/plain")], b"ok")

    async def screen(self, request: Request) -> Response | None:
        return None

    def refuse(self, error: HttpError) -> Response:
        return Response(error.code, [("Content-Type", "text/plain")], error.message.encode())

    def finished(self, exchange: Exchange) -> None:
        pass


def tls_context() -> ssl.SSLContext:
    pair = issue(make_ca("memory-ca"), "127.0.0.1", client=False)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(pair.cert.public_bytes(serialization.Encoding.PEM))
        key.write_bytes(
            pair.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
    return context


@pytest.fixture
def server() -> Iterator[tuple[int, HttpServer]]:
    limits = ServerLimits(
        handshake_timeout=1.0,
        header_timeout=1.0,
        admission=AdmissionLimits(max_connections=16),
    )
    front = HttpServer(Ok(), limits, tls_context())
    sock = socket.create_server(("127.0.0.1", 0))
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def main() -> None:
        box["loop"] = asyncio.get_running_loop()
        box["stop"] = stop = asyncio.Event()
        ready.set()
        await front.serve(sock, stop)

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="front-loop")
    thread.start()
    assert ready.wait(10)
    try:
        yield int(sock.getsockname()[1]), front
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(15)


def server_objects() -> dict[str, int]:
    """The server's objects of one connection that are alive, by kind."""
    kinds = {
        "Channel": Channel,
        "SSLProtocol": sslproto.SSLProtocol,
        "socket transport": getattr(selector_events, "_SelectorSocketTransport"),  # noqa: B009
        "Tracked": Tracked,
    }
    counts = dict.fromkeys([*kinds, "connection task"], 0)
    for o in gc.get_objects():
        cls = type(o)  # not isinstance: a lazy module's proxy in the heap warns when asked
        for name, kind in kinds.items():
            if issubclass(cls, kind):
                counts[name] += 1
        if issubclass(cls, asyncio.Task) and o.get_coro().__qualname__.endswith("_accepted"):
            counts["connection task"] += 1
    return counts


def connections_open(front: HttpServer) -> int:
    admission = front._admission
    return -1 if admission is None else admission.open


def _client() -> ssl.SSLContext:
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    return client


def _partial_hello() -> bytes:
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = _client().wrap_bio(inc, out)
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()[:-1]


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _behave(kind: str, port: int, held: list[socket.socket]) -> None:
    """One client connection of ``kind``; those the server must close are kept in ``held``."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == "connect and close":
        raw.close()
    elif kind == "not a ClientHello":
        raw.sendall(b"\x16\x03\x01 not a ClientHello\r\n\r\n")
        raw.close()
    elif kind in ("half a ClientHello", "more than the cap holds"):
        raw.sendall(_partial_hello())  # the handshake deadline (or a newcomer) closes it
        held.append(raw)
    elif kind in ("a request, then close", "a request, then reset", "half a head"):
        tls = _client().wrap_socket(raw)
        if kind == "half a head":
            tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the head deadline closes it
            held.append(tls)
            return
        tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert tls.recv(12) == b"HTTP/1.1 200"
        if kind == "a request, then reset":
            _reset(socket.socket(fileno=tls.detach()))
        else:
            tls.close()
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "connect and close",
        "not a ClientHello",
        "half a ClientHello",
        "more than the cap holds",
        "a request, then close",
        "a request, then reset",
        "half a head",
    ],
)
def test_a_closed_connection_is_freed_without_the_cyclic_collector(
    server: tuple[int, HttpServer], kind: str
) -> None:
    port, front = server
    count = 40 if kind == "more than the cap holds" else 12  # the cap is 16 connections
    held: list[socket.socket] = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(count):
            _behave(kind, port, held)
        for _ in range(600):  # bounded: the server notices every close, or its deadlines pass
            if connections_open(front) == 0:
                break
            threading.Event().wait(0.05)
        for s in held:
            s.close()
        assert connections_open(front) == 0
        threading.Event().wait(0.2)  # asyncio delivers the losses on its next passes
        alive = server_objects()
    finally:
        gc.enable()
    assert alive == dict.fromkeys(alive, 0), f"{kind}: left in reference cycles: {alive}"
