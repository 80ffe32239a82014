"""Small HTTP reads on loopback: an agent's /metrics, the adapter's API (self-signed TLS)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from edl_common.ports import Band, free_static_port


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on every address a moment ago, below the ephemeral range (so no outgoing
    connection takes it before its server binds it; `edl_common.ports`)."""
    return free_static_port(Band.SERVER, host="::" if ":" in host else "0.0.0.0")


def insecure_tls() -> ssl.SSLContext:
    """Trusts any certificate, as `kubectl --insecure-skip-tls-verify` does (self-signed
    loopback servers only)."""
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    return tls


def fetch(url: str, timeout: float = 3.0, tls: ssl.SSLContext | None = None) -> tuple[int, str]:
    """GET `url`; returns (status, body), (0, reason) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=tls) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except OSError as e:
        return 0, str(e)


def fetch_json(url: str, tls: ssl.SSLContext | None = None) -> dict[str, Any] | None:
    """GET a JSON object; None unless the answer is 200 and parses."""
    status, body = fetch(url, tls=tls)
    if status != 200:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text to {name or name{labels}: value}."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = float(s.value)
    return out


def scrape(port: int, host: str = "127.0.0.1") -> dict[str, float] | None:
    """One scrape of an agent's /metrics, or None if it did not answer."""
    status, body = fetch(f"http://{host}:{port}/metrics")
    if status != 200:
        return None
    try:
        return parse_metrics(body)
    except ValueError:
        return None
