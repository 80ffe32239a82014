"""The agent's HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.

A `ThreadingHTTPServer` on its own daemon thread, serving a private registry (nothing is
registered globally). `/healthz` answers as long as the agent process can serve at all;
`/readyz` asks the readiness check and says in words why it is not ready.
"""

from __future__ import annotations

import errno
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from agent.errors import ExporterError
from agent.readiness import Readiness, ReadinessCheck

log = logging.getLogger(__name__)


def _handler_class(registry: CollectorRegistry, readiness: ReadinessCheck) -> type[Any]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "edl-agent"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                try:
                    body = encoder(registry)
                except Exception as e:  # a scrape must fail loudly, not hang
                    log.exception("metrics rendering failed")
                    self._send(500, "text/plain; charset=utf-8", f"error: {e}\n".encode())
                    return
                self._send(200, content_type, body)
            elif path == "/healthz":
                self._send(200, "text/plain; charset=utf-8", b"ok\n")
            elif path == "/readyz":
                try:
                    verdict = readiness()
                except Exception as e:
                    verdict = Readiness(False, f"readiness check failed: {e}")
                code = 200 if verdict.ready else 503
                text = ("ready: " if verdict.ready else "not ready: ") + verdict.reason + "\n"
                self._send(code, "text/plain; charset=utf-8", text.encode())
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s - %s", self.address_string(), format % args)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class MetricsServer:
    """Serves the registry and the health endpoints on `host:port` from a daemon thread."""

    def __init__(
        self, registry: CollectorRegistry, readiness: ReadinessCheck, host: str, port: int
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._server is None:
            return self._port
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Binds and starts serving.

        Raises:
            ExporterError: the address cannot be bound (in use, not local, no permission).
        """
        try:
            server = _Server(
                (self._host, self._port), _handler_class(self._registry, self._readiness)
            )
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                msg = f"port {self._port} on {self._host} is already in use"
            else:
                msg = f"cannot listen on {self._host}:{self._port}: {e.strerror or e}"
            raise ExporterError(msg) from e
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="edl-exporter",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stops serving and releases the port (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
