"""Production serving: gunicorn, one worker process with a thread pool, TLS in the worker.

One worker keeps one in-memory store (the adapter scales out by replicas, not processes).
The worker class passes each TLS peer certificate to the app (``edl.peer_cert_der``) so
requestheader authentication can check the front proxy's CN.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import ThreadWorker

from metrics_adapter.app import PEER_CERT_ENVIRON_KEY
from metrics_adapter.settings import AdapterSettings
from metrics_adapter.tls import ServingCert

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _release_free_memory() -> None:
    """Give freed heap pages back to the OS after start-up (glibc ``malloc_trim``)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeerCertThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread worker that exposes the TLS client certificate to the WSGI app."""

    def load_wsgi(self) -> None:
        """Wrap the app so each request sees its connection's peer certificate."""
        super().load_wsgi()
        self._peer = threading.local()
        inner: WsgiApp = getattr(self, "wsgi")  # noqa: B009 - set by the base class
        peer = self._peer

        def with_peer_cert(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            environ[PEER_CERT_ENVIRON_KEY] = getattr(peer, "der", None)
            return inner(environ, start_response)

        self.wsgi = with_peer_cert

    def handle_request(self, req: Any, conn: Any) -> Any:
        """Record the connection's peer certificate for this thread, then serve."""
        der = None
        sock = getattr(conn, "sock", None)
        if isinstance(sock, ssl.SSLSocket):
            try:
                der = sock.getpeercert(binary_form=True)
            except (ValueError, ssl.SSLError):
                der = None
        self._peer.der = der
        try:
            return super().handle_request(req, conn)
        finally:
            self._peer.der = None


class AdapterServer(BaseApplication):  # type: ignore[misc]
    """Runs the app built by ``app_factory`` (called in the worker, after fork)."""

    def __init__(
        self,
        settings: AdapterSettings,
        app_factory: Callable[[], WsgiApp],
        cert: ServingCert | None,
        context_factory: Callable[[], ssl.SSLContext] | None,
    ) -> None:
        self._settings = settings
        self._app_factory = app_factory
        self._cert = cert
        self._context_factory = context_factory
        self._context: ssl.SSLContext | None = None
        super().__init__()

    def _ssl_context(self, conf: Any, default_factory: Any) -> ssl.SSLContext:
        if self._context is None:
            assert self._context_factory is not None
            self._context = self._context_factory()
        return self._context

    def load_config(self) -> None:
        """Configure gunicorn from the settings."""
        s = self._settings
        host = f"[{s.host}]" if ":" in s.host else s.host
        options: dict[str, Any] = {
            "bind": [f"{host}:{s.port}"],
            "workers": 1,
            "worker_class": "metrics_adapter.server.PeerCertThreadWorker",
            "threads": s.threads,
            "timeout": 60,
            "graceful_timeout": 5,
            "keepalive": 30,
            "loglevel": s.log_level,
            "errorlog": "-",
            "accesslog": "-" if s.access_log else None,
            # Who asked, with what Accept header: the HPA sends protobuf first and gets JSON.
            "access_log_format": (
                '%(h)s "%(r)s" %(s)s %(b)s %(M)sms user="%({x-remote-user}i)s" '
                'accept="%({accept}i)s" agent="%(a)s"'
            ),
            "proc_name": "edl-adapter",
            "control_socket_disable": True,
        }
        if self._cert is not None:
            options["certfile"] = str(self._cert.cert_file)
            options["keyfile"] = str(self._cert.key_file)
            options["ssl_context"] = self._ssl_context
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> WsgiApp:
        """Build the app (and start its background work) inside the worker.

        Objects alive after start-up (modules, the app) are frozen out of the cyclic garbage
        collector and its first threshold is raised: the store's data is freed by reference
        counting, and full collections over a large store were the main source of tail latency.
        """
        app = self._app_factory()
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        _release_free_memory()
        return app
