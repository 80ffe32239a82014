"""A kube-proxy stand-in for Services whose pods run on loopback addresses.

Nothing here can route a ClusterIP Service to the pods: pod IPs are 127.x addresses, and an
EndpointSlice may not hold a loopback address (kube-apiserver refuses it), so neither the
EndpointSlice controller nor the aggregator's availability check can see them. So a test
turns a Service into `type: ExternalName` with `externalName` = this proxy's address and keeps
its `selector` and `ports`; the proxy listens on that address at every Service port and
forwards each TCP connection to a Ready pod the selector picks (at the port `targetPort`
names), as kube-proxy would. The aggregator calls an ExternalName Service directly, so an
APIService on it works unchanged (TLS passes through untouched).
"""

from __future__ import annotations

import random
import socket
import threading
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from tests.e2e.harness.processes import HarnessError


@dataclass(frozen=True)
class _Listener:
    namespace: str
    service: str
    port: int


class ServiceProxy:
    """Balances connections to `address:<service port>` over the Services' Ready pods."""

    def __init__(self, core: client.CoreV1Api, address: str, namespaces: tuple[str, ...]) -> None:
        self.core = core
        self.address = address
        self.namespaces = namespaces
        self._sockets: dict[_Listener, socket.socket] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def start(self) -> None:
        t = threading.Thread(target=self._sync_loop, name="serviceproxy-sync", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for sock in list(self._sockets.values()):
            sock.close()
        for t in self._threads:
            t.join(timeout=5)

    # ---- which Services, which pods ----------------------------------------------------------

    def _sync_loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._sync()
            except Exception as e:  # keep serving; report at teardown
                self.errors.append(repr(e))

    def _sync(self) -> None:
        for ns in self.namespaces:
            for svc in self.core.list_namespaced_service(ns, _request_timeout=10).items:
                if svc.spec.type != "ExternalName" or svc.spec.external_name != self.address:
                    continue
                for port in svc.spec.ports or []:
                    key = _Listener(ns, str(svc.metadata.name), int(port.port))
                    if key not in self._sockets:
                        self._listen(key)

    def _listen(self, key: _Listener) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.address, key.port))
        except OSError as e:
            sock.close()
            raise HarnessError(f"service proxy cannot listen on {self.address}:{key.port}") from e
        sock.listen(64)
        self._sockets[key] = sock
        t = threading.Thread(target=self._accept_loop, args=(key, sock), daemon=True)
        t.start()
        self._threads.append(t)

    def backends(self, key: _Listener) -> list[tuple[str, int]]:
        """(pod IP, port) of every Ready pod the Service selects, for one Service port."""
        svc = self.core.read_namespaced_service(key.service, key.namespace, _request_timeout=10)
        (port,) = [p for p in svc.spec.ports if int(p.port) == key.port]
        selector = ",".join(f"{k}={v}" for k, v in (svc.spec.selector or {}).items())
        pods = self.core.list_namespaced_pod(
            key.namespace, label_selector=selector, _request_timeout=10
        ).items
        out = []
        for pod in pods:
            if pod.metadata.deletion_timestamp is None and _ready(pod) and pod.status.pod_ip:
                target = _target_port(pod, port.target_port or port.port)
                if target is not None:
                    out.append((pod.status.pod_ip, target))
        return out

    # ---- forwarding --------------------------------------------------------------------------

    def _accept_loop(self, key: _Listener, sock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._forward, args=(key, conn), daemon=True).start()

    def _forward(self, key: _Listener, conn: socket.socket) -> None:
        try:
            backends = self.backends(key)
            if not backends:
                conn.close()  # what a Service with no ready endpoints does: refuse
                return
            upstream = socket.create_connection(random.choice(backends), timeout=5)
        except Exception as e:
            self.errors.append(f"{key}: {e!r}")
            conn.close()
            return
        upstream.settimeout(None)
        pipe = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
        pipe.start()
        _pump(conn, upstream)
        pipe.join(timeout=5)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copies src -> dst until either side closes; then closes both."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _target_port(pod: Any, target: int | str) -> int | None:
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for c in pod.spec.containers:
        for p in c.ports or []:
            if p.name == target:
                return int(p.container_port)
    return None
