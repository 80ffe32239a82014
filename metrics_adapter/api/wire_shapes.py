"""The wire format, as JSON-ready dictionaries.

MetricValueList (v1beta1, v1beta2), ExternalMetricValueList, discovery documents and
``metav1.Status``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from edl_common.quantity import format_quantity
from metrics_adapter.api.routes import CUSTOM_GROUP, EXTERNAL_GROUP, GROUP_VERSIONS
from metrics_adapter.providers.protocol import ExternalPoint, MetricPoint, MetricsProvider
from metrics_adapter.scraping.pod_registry import DescribedObject

JSON = dict[str, Any]


def rfc3339(timestamp: float) -> str:
    """``metav1.Time`` form: RFC 3339, seconds, UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


def _described(obj: DescribedObject) -> JSON:
    out: JSON = {"kind": obj.kind}
    if obj.namespace:
        out["namespace"] = obj.namespace
    out["name"] = obj.name
    if obj.uid:
        out["uid"] = obj.uid
    out["apiVersion"] = obj.api_version
    return out


def metric_item(version: str, p: MetricPoint) -> JSON:
    """One MetricValue in the shape of ``version``."""
    value = format_quantity(p.value)
    window = round(p.definition.window_seconds)
    if version == "v1beta1":
        return {
            "describedObject": _described(p.described),
            "metricName": p.definition.name,
            "timestamp": rfc3339(p.timestamp),
            "window": window,
            "value": value,
            "selector": None,
        }
    return {
        "describedObject": _described(p.described),
        "metric": {"name": p.definition.name, "selector": None},
        "timestamp": rfc3339(p.timestamp),
        "windowSeconds": window,
        "value": value,
    }


def metric_value_list(version: str, points: list[MetricPoint]) -> JSON:
    """A custom.metrics.k8s.io MetricValueList in the shape of ``version``."""
    return {
        "kind": "MetricValueList",
        "apiVersion": f"{CUSTOM_GROUP}/{version}",
        "metadata": {},
        "items": [metric_item(version, p) for p in points],
    }


class MetricListRenderer:
    """Serializes MetricValueLists from each item's cached JSON.

    An item's text depends only on its point (object, metric, value, time, window) and the
    version, so it is written once per point and kept on it (``MetricPoint.rendered``); the
    scraped-pods provider keeps a pod's point until the pod's next scrape, so re-reads of the
    same values, the usual traffic, only join cached text. The providers also keep whole
    answers (the same list object while nothing changed), so the last bodies rendered are
    kept for the lists they were rendered from (``max_bodies`` of them, ``max_bytes`` in all).
    """

    def __init__(self, max_bodies: int = 64, max_bytes: int = 16 * 2**20) -> None:
        self._bodies: dict[tuple[str, int], tuple[list[MetricPoint], bytes]] = {}
        self._bytes = 0
        self._max_bodies = max_bodies
        self._max_bytes = max_bytes

    def render(self, version: str, points: list[MetricPoint]) -> bytes:
        """The list as JSON bytes (identical to ``json.dumps(metric_value_list(...))``)."""
        key = (version, id(points))
        kept = self._bodies.get(key)
        if kept is not None and kept[0] is points:  # the very list (it is held: no id reuse)
            return kept[1]
        body = b"".join(self.render_chunks(version, points, len(points) or 1))
        if len(self._bodies) >= self._max_bodies or self._bytes + len(body) > self._max_bytes:
            self._bodies, self._bytes = {}, 0
        if len(body) <= self._max_bytes:
            self._bodies[key] = (points, body)
            self._bytes += len(body)
        return body

    def render_chunks(
        self, version: str, points: list[MetricPoint], chunk_items: int = 512
    ) -> Iterator[bytes]:
        """The list as JSON, in pieces of ``chunk_items`` items (bounded memory per request)."""
        yield (
            f'{{"kind":"MetricValueList","apiVersion":"{CUSTOM_GROUP}/{version}",'
            '"metadata":{},"items":['
        ).encode()
        for start in range(0, len(points), chunk_items):
            text = b",".join(_items(version, points[start : start + chunk_items]))
            yield (b"," + text) if start else text
        yield b"]}"


def _items(version: str, points: list[MetricPoint]) -> list[bytes]:
    parts: list[bytes] = []
    append = parts.append
    for p in points:
        rendered = p.rendered
        if rendered is None:
            rendered = p.rendered = {}
        text = rendered.get(version)
        if text is None:
            text = rendered[version] = json.dumps(
                metric_item(version, p), separators=(",", ":")
            ).encode()
        append(text)
    return parts


def external_value_list(points: list[ExternalPoint]) -> JSON:
    """An external.metrics.k8s.io/v1beta1 ExternalMetricValueList."""
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": f"{EXTERNAL_GROUP}/v1beta1",
        "metadata": {},
        "items": [
            {
                "metricName": p.metric,
                "metricLabels": p.labels or None,
                "timestamp": rfc3339(p.timestamp),
                "window": round(p.window_seconds),
                "value": format_quantity(p.value),
            }
            for p in points
        ],
    }


def status(code: int, reason: str, message: str) -> JSON:
    """A ``metav1.Status`` failure."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def api_resource_list(group: str, version: str, provider: MetricsProvider) -> JSON:
    """``/apis/<group>/<version>``: one resource per (resource, metric) the provider lists.

    Never empty (the aggregator probes it for availability): a placeholder stands in when
    nothing is served yet.
    """
    resources: list[JSON] = []
    if group == EXTERNAL_GROUP:
        for ext in provider.list_all_external_metrics():
            resources.append(_resource(ext.metric, True, "ExternalMetricValueList"))
        if not resources:
            resources.append(_resource("externalmetrics", True, "ExternalMetricValueList"))
    else:
        for info in provider.list_all_metrics():
            name = f"{info.group_resource}/{info.metric}"
            resources.append(_resource(name, info.namespaced, "MetricValueList"))
        if not resources:
            resources.append(_resource("custommetrics", True, "MetricValueList"))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": resources,
    }


def _resource(name: str, namespaced: bool, kind: str) -> JSON:
    return {
        "name": name,
        "singularName": "",
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["get"],
    }


def api_group(group: str) -> JSON:
    """``/apis/<group>``: versions by priority, v1beta2 preferred for custom metrics."""
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in GROUP_VERSIONS[group]]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions,
        "preferredVersion": versions[0],
    }


def api_group_list() -> JSON:
    """``/apis``: both groups this adapter serves."""
    groups = []
    for group in (CUSTOM_GROUP, EXTERNAL_GROUP):
        doc = api_group(group)
        del doc["kind"], doc["apiVersion"]
        groups.append(doc)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def root_paths() -> JSON:
    """``/``: the paths served (like kube-apiserver's root)."""
    paths = ["/apis", "/healthz", "/livez", "/metrics", "/readyz", "/version"]
    for group, versions in GROUP_VERSIONS.items():
        paths.append(f"/apis/{group}")
        paths.extend(f"/apis/{group}/{v}" for v in versions)
    return {"paths": sorted(paths)}
