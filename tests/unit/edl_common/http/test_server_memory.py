"""A closed connection is freed when it closes, not later by the cyclic garbage collector.

Clients that connect and close before their TLS handshake (or reset it, or send garbage)
once left each connection in reference cycles (the failed handshake's traceback, the
protocol's connect closure, the admission record's task), holding its 256 KiB of TLS buffers
until a collection found them: 1,000 such connects a second took the adapter from 75 MB to
2.5 GB in 15 s (its raised collector threshold collects rarely). Here the collector is off
while connections come and go, so whatever is not freed by reference counting stays countable.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from edl_common.http.request_head import HttpError
from edl_common.http.server import (
    Exchange,
    HttpServer,
    Request,
    Response,
    ServerLimits,
    _StreamProtocol,
)
from tests.support.pki import issue, make_ca

pytestmark = pytest.mark.unit


class Ok:
    """Answers every request with 200."""

    async def respond(self, request: Request) -> Response:
        return Response(200, [("Content-Type", "text/plain")], b"ok")

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
    front = HttpServer(Ok(), ServerLimits(handshake_timeout=5.0), tls_context())
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


def protocols_alive() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, _StreamProtocol))


def connections_open(front: HttpServer) -> int:
    admission = front._admission
    return -1 if admission is None else admission.open


def test_connections_that_close_before_or_after_their_handshake_are_freed(
    server: tuple[int, HttpServer],
) -> None:
    port, front = server
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    gc.collect()
    gc.disable()
    try:
        for i in range(150):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                if i % 3 == 1:
                    raw.sendall(b"\x16\x03\x01 not a ClientHello\r\n\r\n")  # a failed handshake
                elif i % 3 == 2:  # a whole request over TLS
                    with client.wrap_socket(raw) as tls:
                        tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        assert tls.recv(12) == b"HTTP/1.1 200"
                # i % 3 == 0: connect and close, nothing sent
        for _ in range(200):  # bounded: the server notices every close
            if connections_open(front) == 0:
                break
            threading.Event().wait(0.05)
        assert connections_open(front) == 0
        alive = protocols_alive()
    finally:
        gc.enable()
    assert alive <= 3, f"{alive} connections' protocols not freed (reference cycles)"
