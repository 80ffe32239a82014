"""Hostile slow clients for the servers' tests: half-open TLS handshakes, idle connects,
idle keep-alive connections, slowloris heads, bursts of connects, slow request bodies and
pipelined requests."""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import ssl
import threading
import time


def connect(port: int, source: str | None = None, timeout: float = 5.0) -> socket.socket:
    """A TCP connection to 127.0.0.1:`port`, from the loopback address `source` when given."""
    address = None if source is None else (source, 0)
    return socket.create_connection(("127.0.0.1", port), timeout, source_address=address)


def loopback_sources(count: int) -> list[str]:
    """`count` loopback addresses to connect from: 127.0.0.2, 127.0.0.3..."""
    return [f"127.0.0.{2 + i}" for i in range(count)]


def stranger_context() -> ssl.SSLContext:
    """A TLS client that trusts anything and shows no certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class HalfOpenConnections:
    """Keeps `partial` connections that sent a ClientHello minus its last byte and `idle`
    that sent nothing open, re-opening each one the server drops (from `sources` in turn,
    loopback addresses, when given)."""

    def __init__(
        self, port: int, partial: int, idle: int, sources: list[str] | None = None
    ) -> None:
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        obj = ctx.wrap_bio(inc, out)
        with contextlib.suppress(ssl.SSLWantReadError):
            obj.do_handshake()
        self.hello = out.read()[:-1]
        self.port = port
        self.kinds = [True] * partial + [False] * idle
        self.sources: list[str | None] = [*sources] if sources else [None]
        self.dropped = 0
        self.opened = 0
        self.socks: list[socket.socket | None] = []
        """The connections held (None: a re-open that failed), once all were opened."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, partial: bool) -> socket.socket | None:
        try:
            s = connect(self.port, self.sources[self.opened % len(self.sources)])
            self.opened += 1
            if partial:
                s.sendall(self.hello)
            s.setblocking(False)
            return s
        except OSError:
            return None

    def _run(self) -> None:
        socks = [self._open(p) for p in self.kinds]
        self.socks = socks
        for _ in range(100_000):
            if self._stop.wait(0.2):
                break
            for i, s in enumerate(socks):
                try:
                    alive = s is not None and s.recv(1) != b""
                except BlockingIOError:
                    alive = True
                except OSError:
                    alive = False
                if not alive:
                    if s is not None:
                        s.close()
                        self.dropped += 1
                    socks[i] = self._open(self.kinds[i])
        for s in socks:
            if s is not None:
                s.close()

    def __enter__(self) -> HalfOpenConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class IdleKeepAlive:
    """Keeps `count` connections that each sent one request (``GET /healthz``), read the
    answer and then idle, re-opening each one the server closes: the unauthenticated
    keep-alive exhaustion of issue 25 (TLS when `context` is given)."""

    def __init__(self, port: int, count: int, context: ssl.SSLContext | None = None) -> None:
        self.port = port
        self.count = count
        self.context = context
        self.dropped = 0
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            if self.context is not None:
                s = self.context.wrap_socket(s)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:  # the head of the answer; the rest is drained later
                chunk = s.recv(4096)
                if not chunk:
                    s.close()
                    return None
                data += chunk
            s.setblocking(False)
            self.opened += 1
            return s
        except OSError:
            return None

    def _alive(self, s: socket.socket) -> bool:
        try:
            return s.recv(4096) != b""  # leftover answer bytes: still open
        except (BlockingIOError, ssl.SSLWantReadError):
            return True
        except OSError:
            return False

    def _run(self) -> None:
        socks: list[socket.socket | None] = []
        for _ in range(self.count):
            if self._stop.is_set():
                break
            socks.append(self._open())
        for _ in range(100_000):
            if self._stop.wait(0.2):
                break
            for i, s in enumerate(socks):
                if self._stop.is_set():
                    break
                if s is None or not self._alive(s):
                    if s is not None:
                        s.close()
                        self.dropped += 1
                    socks[i] = self._open()
        for s in socks:
            if s is not None:
                s.close()

    def __enter__(self) -> IdleKeepAlive:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def request_then_close_notify(port: int, request: bytes) -> bytes:
    """One TLS connection whose last handshake flight, ``request`` and a close_notify leave in
    one send, followed by a half-close: the server reads the close_notify before its
    handshake coroutine resumes. Returns what the server sent back, as TLS records (bounded;
    not decrypted: after its own close_notify the client's SSLObject reads nothing more)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out)
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        for _ in range(20):  # handshake round trips, bounded
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(out.read())
                data = raw.recv(65536)
                if not data:
                    return got
                inc.write(data)
        obj.write(request)
        with contextlib.suppress(ssl.SSLError):
            obj.unwrap()  # queues close_notify; the peer's is not awaited
        raw.sendall(out.read())
        raw.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            for _ in range(1000):
                data = raw.recv(65536)
                if not data:
                    break
                got += data
    return got


class Slowloris:
    """Keeps `count` connections that send a request head one byte per `interval` seconds
    and never finish it, re-opening each one the server closes."""

    HEAD = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 4000

    def __init__(self, port: int, count: int, interval: float = 1.0) -> None:
        self.port = port
        self.count = count
        self.interval = interval
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> tuple[socket.socket, int] | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(self.HEAD[:20])
            s.setblocking(False)
            return s, 20
        except OSError:
            return None

    def _run(self) -> None:
        conns = [self._open() for _ in range(self.count)]
        for _ in range(100_000):
            if self._stop.wait(self.interval):
                break
            for i, held in enumerate(conns):
                try:
                    if held is None:
                        raise ConnectionError("not open")
                    s, sent = held
                    with contextlib.suppress(BlockingIOError):
                        if s.recv(4096) == b"":
                            raise ConnectionError("closed")
                    s.send(self.HEAD[sent : sent + 1])
                    conns[i] = (s, min(sent + 1, len(self.HEAD) - 1))
                except OSError:
                    if held is not None:
                        held[0].close()
                        self.dropped += 1
                    conns[i] = self._open()
        for held in conns:
            if held is not None:
                held[0].close()

    def __enter__(self) -> Slowloris:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


class ConnectBurst:
    """Every `every` seconds, `count` TCP connects at once (non-blocking, no byte sent), each
    closed once connected: the accept queue under a burst. A connect that takes 1 s or more
    waited for a SYN retransmission (the listen backlog was full); `failed` were refused, reset
    or not connected within 5 s."""

    def __init__(self, port: int, count: int, every: float = 1.0) -> None:
        self.port = port
        self.count = count
        self.every = every
        self.opened = 0
        self.slow = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _burst(self) -> None:
        started = time.monotonic()
        pending: dict[int, socket.socket] = {}
        for _ in range(self.count):
            s = socket.socket()
            s.setblocking(False)
            if s.connect_ex(("127.0.0.1", self.port)) in (0, errno.EINPROGRESS):
                pending[s.fileno()] = s
            else:
                s.close()
                self.failed += 1
        poller = select.poll()
        for fd in pending:
            poller.register(fd, select.POLLOUT)
        deadline = started + 5.0
        for _ in range(10_000):  # bounded: each round settles at least one or times out
            if not pending or time.monotonic() >= deadline:
                break
            for fd, _ in poller.poll(100):
                s = pending.pop(fd)
                poller.unregister(fd)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    self.opened += 1
                    self.slow += time.monotonic() - started >= 1.0
                else:
                    self.failed += 1
                s.close()
        self.failed += len(pending)
        for s in pending.values():
            s.close()

    def _run(self) -> None:
        for _ in range(100_000):
            self._burst()
            if self._stop.wait(self.every):
                break

    def __enter__(self) -> ConnectBurst:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


class SlowBodies:
    """Keeps `count` TLS connections that each send a request head announcing a body
    (``Expect: 100-continue``, `length` bytes) and then the body one byte every `every`
    seconds, re-opening each one the server closes, from `sources` in turn. Counts the
    ``100 Continue`` answers the server sent and the other answers (a refusal)."""

    def __init__(
        self,
        port: int,
        count: int,
        path: str = "/healthz",
        sources: list[str] | None = None,
        every: float = 2.0,
        length: int = 1000,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.port = port
        self.count = count
        self.head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
        ).encode()
        self.sources: list[str | None] = [*sources] if sources else [None]
        self.every = every
        self.context = context or stranger_context()
        self.opened = 0
        self.dropped = 0
        self.continues = 0
        """``100 Continue`` answers received."""
        self.refusals = 0
        """Final answers received (the server refused the body)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> ssl.SSLSocket | None:
        try:
            raw = connect(self.port, self.sources[self.opened % len(self.sources)], 10)
            s = self.context.wrap_socket(raw)
            s.sendall(self.head)
            s.setblocking(False)
            self.opened += 1
            return s
        except OSError:
            return None

    def _tick(self, s: ssl.SSLSocket) -> bool:
        """Read what the server said and send one more byte; False: closed."""
        try:
            data = s.recv(4096)
            if not data:
                return False
            self.continues += data.count(b"HTTP/1.1 100")
            self.refusals += data.count(b"HTTP/1.1 4") + data.count(b"HTTP/1.1 5")
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
        except OSError:
            return False
        try:
            s.send(b"x")
        except (BlockingIOError, ssl.SSLWantWriteError):
            pass
        except OSError:
            return False
        return True

    def _run(self) -> None:
        socks: list[ssl.SSLSocket | None] = []
        for _ in range(self.count):
            if self._stop.is_set():
                break
            socks.append(self._open())
        for _ in range(100_000):
            if self._stop.wait(self.every):
                break
            for i, s in enumerate(socks):
                if s is None or not self._tick(s):
                    if s is not None:
                        s.close()
                        self.dropped += 1
                    socks[i] = self._open()
        for s in socks:
            if s is not None:
                s.close()

    def __enter__(self) -> SlowBodies:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


class Pipelining:
    """`connections` TLS connections that each write `GET path` `batch` at a time and read
    the answers, over and over, re-opening when the server closes one: issue 37's attack."""

    def __init__(
        self,
        port: int,
        connections: int,
        path: str = "/healthz",
        batch: int = 200,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.port = port
        self.count = connections
        self.batch = (f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n" * batch).encode()
        self.per_batch = batch
        self.context = context or stranger_context()
        self.opened = 0
        self.dropped = 0
        self.answered = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, daemon=True) for _ in range(connections)
        ]

    def _answers(self, s: ssl.SSLSocket) -> None:
        """Read the answers to one batch (counted as they come)."""
        seen = 0
        tail = b""
        for _ in range(1_000_000):  # bounded: each recv brings bytes or ends
            if seen >= self.per_batch or self._stop.is_set():
                return
            data = s.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            joined = tail + data  # a status line may straddle two reads
            found = joined.count(b"HTTP/1.1 ")
            seen += found
            self.answered += found
            tail = joined[-8:]  # shorter than the pattern: never counted twice

    def _run(self) -> None:
        for _ in range(100_000):  # connections, re-opened when closed
            if self._stop.is_set():
                return
            try:
                raw = connect(self.port, None, 30)
                with self.context.wrap_socket(raw) as s:
                    self.opened += 1
                    for _ in range(10_000_000):  # batches, until stopped
                        if self._stop.is_set():
                            return
                        s.sendall(self.batch)
                        self._answers(s)
            except OSError:
                self.dropped += 1
                self._stop.wait(0.1)

    def __enter__(self) -> Pipelining:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)
