"""Turn-taking: a connection that pipelines requests cannot keep others from being answered.

Issue 37: one TLS connection writing ``GET /healthz`` 200 at a time took the metrics API off
kube-apiserver; four of them and no authorised request was answered. The turn-taking alone
(``TurnTaking`` on a real event loop, counted in rounds of the loop), then the real front end
on 127.0.0.1 with thousands of pipelined requests and another client asking meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from edl_common.http.fairness import FairnessLimits, Turn, TurnTaking
from edl_common.http.request_head import HttpError
from edl_common.http.server import Exchange, HttpServer, Request, Response, ServerLimits
from tests.support.pki import Issued, issue, make_ca

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------- the turn-taking alone


async def _answer_forever(
    turns: TurnTaking, turn: Turn, log: list[tuple[int, str]], stop: asyncio.Event
) -> None:
    """A connection with requests always buffered: it takes a turn and answers, again."""
    for _ in range(100_000):
        if stop.is_set():
            return
        await turns.take(turn, lambda: None)
        log.append((turns._round, turn.flow))


def _rounds(log: list[tuple[int, str]]) -> dict[int, list[str]]:
    by_round: dict[int, list[str]] = {}
    for r, flow in log:
        by_round.setdefault(r, []).append(flow)
    return by_round


def test_strangers_get_a_bounded_number_of_answers_per_round_and_take_turns_by_address() -> None:
    async def main() -> list[tuple[int, str]]:
        turns = TurnTaking(FairnessLimits(unprivileged_seats=2))
        log: list[tuple[int, str]] = []
        stop = asyncio.Event()
        flood = [Turn("10.0.0.1", False) for _ in range(4)]  # one address, four connections
        other = Turn("10.0.0.2", False)
        tasks = [asyncio.create_task(_answer_forever(turns, t, log, stop)) for t in flood]
        tasks.append(asyncio.create_task(_answer_forever(turns, other, log, stop)))
        for _ in range(200):  # passes of the loop
            await asyncio.sleep(0)
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert turns.waiting == 0  # cancelled waiters leave their queues
        return log

    log = asyncio.run(main())
    rounds = _rounds(log)
    assert len(rounds) > 20
    assert max(len(flows) for flows in rounds.values()) <= 2  # two seats a round, in all
    served = [flow for _, flow in log]
    # the lone address gets as many turns as the address with four connections
    assert abs(served.count("10.0.0.2") - served.count("10.0.0.1")) <= 2


def test_a_privileged_connection_is_not_held_back_by_strangers_and_yields_after_a_burst() -> None:
    async def main() -> tuple[list[tuple[int, str]], int]:
        turns = TurnTaking(FairnessLimits(unprivileged_seats=1, privileged_burst=4))
        log: list[tuple[int, str]] = []
        stop = asyncio.Event()
        strangers = [Turn(f"10.0.1.{i}", False) for i in range(50)]
        proxy = Turn("10.0.0.9", True)
        tasks = [asyncio.create_task(_answer_forever(turns, t, log, stop)) for t in strangers]
        passes = 0

        async def proxy_answers() -> None:
            nonlocal passes
            for _ in range(40):
                await turns.take(proxy, lambda: None)
                log.append((turns._round, "proxy"))

        async def count_passes() -> None:
            nonlocal passes
            while not stop.is_set():
                passes += 1
                await asyncio.sleep(0)

        counter = asyncio.create_task(count_passes())
        await proxy_answers()
        stop.set()
        for task in [*tasks, counter]:
            task.cancel()
        await asyncio.gather(*tasks, counter, return_exceptions=True)
        return log, passes

    log, passes = asyncio.run(main())
    rounds = _rounds(log)
    strangers_per_round = [sum(f != "proxy" for f in flows) for flows in rounds.values()]
    assert max(strangers_per_round) <= 1  # fifty strangers, one seat a round
    # forty answers for the proxy, yielding once per burst of four: about ten passes of the
    # loop, while fifty strangers would take fifty rounds to be answered once each
    assert passes <= 20
    assert [f for _, f in log].count("proxy") == 40


def test_strangers_take_at_most_their_share_of_the_loops_time() -> None:
    """Strangers whose every request keeps the loop busy 2 ms of CPU: what they take stays
    within their share of the time that passed (plus the burst, plus one round's requests),
    where without a share they would take all of it."""
    limits = FairnessLimits(
        unprivileged_seats=2, unprivileged_share=0.25, unprivileged_burst_s=0.01
    )

    async def main() -> tuple[float, float]:
        turns = TurnTaking(limits)
        stop = asyncio.Event()
        busy = [0.0]

        async def stranger(flow: str) -> None:
            turn = Turn(flow, False)
            for _ in range(100_000):
                if stop.is_set():
                    return
                await turns.take(turn, lambda: None)
                began = time.thread_time()  # the loop thread's CPU, as the front end counts
                while time.thread_time() - began < 0.002:  # the request's work, on the loop
                    pass
                took = time.thread_time() - began
                busy[0] += took
                turns.spent(turn, took)

        began = time.monotonic()
        tasks = [asyncio.create_task(stranger(f"10.0.0.{i}")) for i in range(4)]
        await asyncio.sleep(0.5)
        stop.set()
        elapsed = time.monotonic() - began
        await asyncio.gather(*tasks, return_exceptions=True)
        return busy[0], elapsed

    busy, elapsed = asyncio.run(main())
    # what one round may overdraw: its two seats' requests, each charged at most 20 ms
    allowed = limits.unprivileged_burst_s + limits.unprivileged_share * elapsed + 2 * 0.02
    assert 0 < busy <= allowed, f"strangers took {busy:.3f} s of {elapsed:.3f} s"


def test_a_waiting_connection_is_told_it_waits() -> None:
    async def main() -> int:
        turns = TurnTaking(FairnessLimits(unprivileged_seats=1))
        told = []
        first, second = Turn("a", False), Turn("b", False)
        await turns.take(first, lambda: told.append("a"))  # a seat is free: no wait
        await turns.take(second, lambda: told.append("b"))  # the round's seat is taken
        assert told == ["b"]
        return turns.waits

    assert asyncio.run(main()) == 1


# ----------------------------------------------------------------- the real front end


@dataclass
class Counting:
    """Answers every request with 200; counts the flood's answers in each pass of the loop."""

    flood: int = 0
    passes: int = 0
    """Passes of the server's event loop so far (a task there counts them)."""
    per_pass: dict[int, int] = field(default_factory=dict)
    """Flood requests answered in each pass of the loop."""

    async def respond(self, request: Request) -> Response:
        if request.head.path == "/flood":
            self.flood += 1
            self.per_pass[self.passes] = self.per_pass.get(self.passes, 0) + 1
        return Response(200, [("Content-Type", "text/plain")], b"ok")

    async def count_passes(self, stop: asyncio.Event) -> None:
        for _ in range(100_000_000):  # bounded; one step per pass of the loop
            if stop.is_set():
                return
            self.passes += 1
            await asyncio.sleep(0)

    async def screen(self, request: Request) -> Response | None:
        return None

    def refuse(self, error: HttpError) -> Response:
        return Response(error.code, [("Content-Type", "text/plain")], error.message.encode())

    def finished(self, exchange: Exchange) -> None:
        pass


@dataclass
class Pki:
    server: ssl.SSLContext
    proxy: Issued
    dir: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("fair-pki")
    ca = make_ca("fair-ca")
    pair = issue(ca, "127.0.0.1", client=False)
    cert, key = d / "tls.crt", d / "tls.key"
    cert.write_bytes(pair.pem)
    key.write_bytes(
        pair.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(cadata=ca.pem.decode())
    context.verify_mode = ssl.CERT_OPTIONAL  # the front proxy shows a certificate
    return Pki(context, issue(ca, "front-proxy-client"), d)


@pytest.fixture
def served(pki: Pki) -> Iterator[tuple[int, Counting]]:
    handler = Counting()
    front = HttpServer(handler, ServerLimits(), pki.server)
    sock = socket.create_server(("127.0.0.1", 0))
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def main() -> None:
        box["loop"] = asyncio.get_running_loop()
        box["stop"] = stop = asyncio.Event()
        ready.set()
        counter = asyncio.create_task(handler.count_passes(stop))
        await front.serve(sock, stop)
        await counter

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="front-loop")
    thread.start()
    assert ready.wait(10)
    try:
        yield int(sock.getsockname()[1]), handler
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(30)


def _client(pair: Issued | None = None, directory: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if pair is not None:
        assert directory is not None
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            cert, key = Path(tmp) / "c.crt", Path(tmp) / "c.key"
            cert.write_bytes(pair.pem)
            key.write_bytes(pair.key_pem)
            ctx.load_cert_chain(cert, key)
    return ctx


class Flood:
    """Connections that each write ``GET /flood`` 200 at a time and read the answers, until
    stopped (bounded: a minute)."""

    BATCH = b"GET /flood HTTP/1.1\r\nHost: x\r\n\r\n" * 200

    def __init__(self, port: int, connections: int) -> None:
        self.port = port
        self.answered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(connections)]

    def _run(self) -> None:
        try:
            raw = socket.create_connection(("127.0.0.1", self.port), timeout=60)
            with _client().wrap_socket(raw) as tls:
                deadline = time.monotonic() + 60
                while not self._stop.is_set() and time.monotonic() < deadline:
                    tls.sendall(self.BATCH)
                    self._read(tls, 200)
        except OSError as e:
            self.errors.append(repr(e))

    def _read(self, tls: ssl.SSLSocket, answers: int) -> None:
        data = b""
        for _ in range(100_000):  # bounded: each recv brings bytes or ends
            if data.count(b"HTTP/1.1 200") >= answers and data.endswith(b"ok"):
                break
            chunk = tls.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        self.answered += data.count(b"HTTP/1.1 200")

    def __enter__(self) -> Flood:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(90)


def _ask(port: int, ctx: ssl.SSLContext) -> bytes:
    """One request on a new connection; the answer's status line (a 30 s deadline)."""
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30)) as tls:
        tls.sendall(b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return tls.recv(12)


@pytest.mark.parametrize(
    ("connections", "who"), [(1, "a stranger"), (4, "a stranger"), (4, "the front proxy")]
)
def test_another_client_is_answered_while_thousands_of_requests_are_pipelined(
    served: tuple[int, Counting], pki: Pki, connections: int, who: str
) -> None:
    port, handler = served
    ctx = _client(pki.proxy, pki.dir) if who == "the front proxy" else _client()
    with Flood(port, connections) as flood:
        for _ in range(600):  # bounded: the flood is being answered before anyone asks
            if handler.flood >= 1000:
                break
            time.sleep(0.05)
        assert handler.flood >= 1000, flood.errors
        answers = []
        for _ in range(3):
            with contextlib.suppress(OSError):
                answers.append(_ask(port, ctx))
        before = handler.flood
        for _ in range(600):  # and it goes on afterwards
            if handler.flood > before + 200:
                break
            time.sleep(0.05)
        after = handler.flood
    assert answers == [b"HTTP/1.1 200"] * 3, f"{who} under {connections} flooding connections"
    assert after > before, "the flood was still being answered after the other client's turn"
    assert not flood.errors
    # the flood's connections wrote 200 requests at a time: without turns each batch was
    # answered in one pass of the loop, with nothing else run in between
    most = max(handler.per_pass.values())
    # a round's requests run in the pass after it starts, beside the next round's first
    assert most <= 2 * FairnessLimits().unprivileged_seats, f"{most} flood answers in one pass"
