"""Request bodies: screened on the head, ``100 Continue`` only then, and bounded in memory.

The real front end on 127.0.0.1 (plain HTTP), with a handler that refuses bodies from whoever
sends ``X-Who: stranger`` (the adapter refuses those of clients its filters did not
authenticate).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from edl_common.http.memory import MemoryBudget
from edl_common.http.request_head import HttpError
from edl_common.http.server import Exchange, HttpServer, Request, Response, ServerLimits

pytestmark = pytest.mark.unit


class Screening:
    """Echoes the body's length; refuses a body from a stranger before it is read."""

    def __init__(self) -> None:
        self.screened = 0

    async def respond(self, request: Request) -> Response:
        return Response(200, [("Content-Type", "text/plain")], b"%d" % len(request.body))

    async def screen(self, request: Request) -> Response | None:
        self.screened += 1
        if request.head.first("x-who") == "stranger":
            return Response(401, [("Content-Type", "text/plain")], b"who are you?")
        return None

    def refuse(self, error: HttpError) -> Response:
        return Response(error.code, [("Content-Type", "text/plain")], error.message.encode())

    def finished(self, exchange: Exchange) -> None:
        pass


def _serve(memory: MemoryBudget | None = None) -> Iterator[tuple[int, Screening]]:
    handler = Screening()
    front = HttpServer(handler, ServerLimits(), memory=memory)
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
        yield int(sock.getsockname()[1]), handler
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(15)


@pytest.fixture
def served() -> Iterator[tuple[int, Screening]]:
    yield from _serve()


def _head(who: str, length: int = 5, path: str = "/") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Who: {who}\r\nContent-Length: {length}\r\n"
        "Expect: 100-continue\r\n\r\n"
    ).encode()


def _until_head_end(sock: socket.socket) -> bytes:
    data = b""
    for _ in range(1000):  # bounded: each recv brings bytes or ends
        if b"\r\n\r\n" in data:
            break
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_a_refused_body_is_never_invited_nor_read(served: tuple[int, Screening]) -> None:
    port, handler = served
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(_head("stranger"))
        first = _until_head_end(s)
        assert first.startswith(b"HTTP/1.1 401"), first
        assert b"Connection: close" in first
    assert handler.screened == 1


def test_an_accepted_body_is_invited_read_and_the_next_request_served(
    served: tuple[int, Screening],
) -> None:
    port, _ = served
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(_head("friend"))
        assert _until_head_end(s).startswith(b"HTTP/1.1 100")
        # the body in its own write, the next request right behind it
        s.sendall(b"hello" + b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answers = b""
        for _ in range(1000):
            chunk = s.recv(4096)
            if not chunk:
                break
            answers += chunk
    assert answers.count(b"HTTP/1.1 200") == 2, answers
    assert b"\r\n\r\n5HTTP/1.1" in answers and answers.endswith(b"\r\n\r\n0")


def test_a_strangers_body_past_the_memory_budget_is_refused_with_429() -> None:
    # room for a connection (16 KiB), not for its 60 KB body: high water 734,003 bytes
    memory = MemoryBudget(1 << 20, rss=lambda: 700_000)
    for port, handler in _serve(memory):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(_head("friend", 60_000))
            first = _until_head_end(s)
        assert first.startswith(b"HTTP/1.1 429"), first
        assert handler.screened == 1  # screened first, then found no room
