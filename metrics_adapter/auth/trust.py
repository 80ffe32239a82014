"""ClientTrust: the CAs the server trusts for client certificates, from files or the cluster.

Without ``--requestheader-client-ca-file``/``--client-ca-file``, delegated authentication
reads them from ConfigMap ``kube-system/extension-apiserver-authentication`` (needs the
``extension-apiserver-authentication-reader`` Role), as kube-apiserver's delegation does.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metrics_adapter.auth.authn import (
    ClientCertAuthenticator,
    RequestHeaderAuthenticator,
    load_ca_bundle,
)
from metrics_adapter.errors import SourceError
from metrics_adapter.periodic import PeriodicTask

log = logging.getLogger(__name__)

AUTH_CONFIGMAP_NAMESPACE = "kube-system"
AUTH_CONFIGMAP_NAME = "extension-apiserver-authentication"


@dataclass
class ClientTrust:
    """PEM bundles and requestheader options for client authentication."""

    requestheader_ca_pem: bytes | None = None
    client_ca_pem: bytes | None = None
    allowed_names: list[str] = field(default_factory=list)
    username_headers: list[str] = field(default_factory=lambda: ["X-Remote-User"])
    group_headers: list[str] = field(default_factory=lambda: ["X-Remote-Group"])
    extra_prefixes: list[str] = field(default_factory=lambda: ["X-Remote-Extra-"])

    def ca_bundle(self) -> bytes | None:
        """Both CAs as one PEM bundle for the TLS layer (None when there is none)."""
        pems = [p for p in (self.requestheader_ca_pem, self.client_ca_pem) if p]
        if not pems:
            return None
        return b"\n".join(p.strip() + b"\n" for p in pems)


def trust_from_configmap(api_client: Any, timeout: float = 10.0) -> ClientTrust:
    """Read the cluster's authentication ConfigMap.

    Raises:
        SourceError: when it cannot be read.
    """
    from kubernetes import client as k8s

    try:
        cm = k8s.CoreV1Api(api_client).read_namespaced_config_map(
            AUTH_CONFIGMAP_NAME, AUTH_CONFIGMAP_NAMESPACE, _request_timeout=timeout
        )
    except Exception as e:
        raise SourceError(
            f"cannot read {AUTH_CONFIGMAP_NAMESPACE}/{AUTH_CONFIGMAP_NAME}: {e}"
        ) from e
    data: dict[str, str] = cm.data or {}

    def strings(key: str, default: list[str]) -> list[str]:
        raw = data.get(key)
        if not raw:
            return default
        try:
            value = json.loads(raw)
        except ValueError:
            return default
        return [str(v) for v in value] if isinstance(value, list) else default

    return ClientTrust(
        requestheader_ca_pem=(data.get("requestheader-client-ca-file") or "").encode() or None,
        client_ca_pem=(data.get("client-ca-file") or "").encode() or None,
        allowed_names=strings("requestheader-allowed-names", []),
        username_headers=strings("requestheader-username-headers", ["X-Remote-User"]),
        group_headers=strings("requestheader-group-headers", ["X-Remote-Group"]),
        extra_prefixes=strings("requestheader-extra-headers-prefix", ["X-Remote-Extra-"]),
    )


class TlsClientTrust:
    """The TLS layer's client CAs; CAs added at run time apply to new connections.

    OpenSSL can add trusted CAs to a live context but not remove them; a removed CA is still
    dropped where it matters, in the authenticators' issuer check.
    """

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._pending: list[bytes] = []

    def attach(self, context: ssl.SSLContext) -> None:
        """Use this server context (created in the worker process)."""
        self._context = context
        for pem in self._pending:
            self._load(pem)

    def add(self, pem: bytes) -> None:
        """Trust the CAs of a PEM bundle for client certificates."""
        self._pending.append(pem)
        if self._context is not None:
            self._load(pem)

    def _load(self, pem: bytes) -> None:
        assert self._context is not None
        self._context.load_verify_locations(cadata=pem.decode())
        if self._context.verify_mode == ssl.CERT_NONE:
            self._context.verify_mode = ssl.CERT_OPTIONAL


class TrustRefresher:
    """Re-reads the cluster's authentication ConfigMap and applies rotated CAs and names."""

    def __init__(
        self,
        read: Callable[[], ClientTrust],
        current: ClientTrust,
        requestheader: RequestHeaderAuthenticator,
        client_cert: ClientCertAuthenticator,
        tls: TlsClientTrust | None,
        interval: float,
    ) -> None:
        self._read = read
        self._current = current
        self._requestheader = requestheader
        self._client_cert = client_cert
        self._tls = tls
        self._task = PeriodicTask("auth-configmap", interval, self.refresh)

    def refresh(self) -> bool:
        """Apply the ConfigMap's current content; returns whether anything changed."""
        try:
            fresh = self._read()
        except SourceError as e:
            log.warning("keeping the current client CAs: %s", e)
            return False
        old = self._current
        changed = False
        if (fresh.requestheader_ca_pem, fresh.allowed_names) != (
            old.requestheader_ca_pem,
            old.allowed_names,
        ):
            pem = fresh.requestheader_ca_pem
            self._requestheader.update(load_ca_bundle(pem) if pem else [], fresh.allowed_names)
            if pem and self._tls is not None:
                self._tls.add(pem)
            changed = True
        if fresh.client_ca_pem != old.client_ca_pem:
            pem = fresh.client_ca_pem
            self._client_cert.update(load_ca_bundle(pem) if pem else [])
            if pem and self._tls is not None:
                self._tls.add(pem)
            changed = True
        if changed:
            log.info("client CAs or requestheader allowed names changed: applied")
        self._current = fresh
        return changed

    def start(self) -> None:
        """Start re-reading (the first read happens at once)."""
        self._task.start()

    def stop(self) -> None:
        """Stop re-reading."""
        self._task.stop()
