"""Hostile slow clients for the adapter's tests: half-open TLS handshakes and idle connects."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading


class HalfOpenConnections:
    """Keeps `partial` connections that sent a ClientHello minus its last byte and `idle`
    that sent nothing open, re-opening each one the server drops."""

    def __init__(self, port: int, partial: int, idle: int) -> None:
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
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, partial: bool) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if partial:
                s.sendall(self.hello)
            s.setblocking(False)
            return s
        except OSError:
            return None

    def _run(self) -> None:
        socks = [self._open(p) for p in self.kinds]
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
