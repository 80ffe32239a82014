"""ClientTrust: the CAs the server trusts for client certificates, from files or the cluster.

Without ``--requestheader-client-ca-file``/``--client-ca-file``, delegated authentication
reads them from ConfigMap ``kube-system/extension-apiserver-authentication`` (needs the
``extension-apiserver-authentication-reader`` Role), as kube-apiserver's delegation does.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metrics_adapter.errors import SourceError

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

    def bundle_file(self, directory: Path | None = None) -> Path | None:
        """Write both CAs into one file for the TLS layer (None when there is none)."""
        pems = [p for p in (self.requestheader_ca_pem, self.client_ca_pem) if p]
        if not pems:
            return None
        target = (
            Path(tempfile.mkdtemp(prefix="edl-adapter-ca-")) if directory is None else directory
        )
        target.mkdir(parents=True, exist_ok=True)
        path = target / "client-ca-bundle.crt"
        path.write_bytes(b"\n".join(p.strip() + b"\n" for p in pems))
        return path


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
