"""FakeProvider: a MetricsProvider whose values a test sets, shipped for users' own tests.

Like custom-metrics-apiserver's ``test-adapter``: serve it through the real app
(:func:`metrics_adapter.api.flask_app.create_app`) and an HPA, a dashboard query or a client
sees exactly the wire format, discovery and 404s the real adapter gives, for values chosen by
the test::

    fake = FakeProvider()
    fake.set_custom("pods", "trainer-0", "samples_per_second", 120.0, namespace="ml",
                    labels={"app": "trainer"})
    fake.set_external("ml", "desired_replicas", 3, labels={"job": "digits"})

Objects are keyed by group-qualified resource (``pods``, ``deployments.apps``, ``nodes``),
namespace (None for root-scoped objects) and name; a label selector matches the object's
labels, a metric selector the value's metric labels.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from metrics_adapter.errors import NotFoundError
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.providers.protocol import (
    CustomMetricInfo,
    ExternalMetricInfo,
    ExternalPoint,
    MetricPoint,
)
from metrics_adapter.scraping.catalogue import (
    Aggregation,
    MetricDefinition,
    MetricKind,
    SeriesTerm,
)
from metrics_adapter.scraping.pod_registry import DescribedObject

_KINDS = {
    "pods": ("Pod", "v1"),
    "nodes": ("Node", "v1"),
    "namespaces": ("Namespace", "v1"),
    "services": ("Service", "v1"),
    "deployments.apps": ("Deployment", "apps/v1"),
    "statefulsets.apps": ("StatefulSet", "apps/v1"),
    "replicasets.apps": ("ReplicaSet", "apps/v1"),
    "jobs.batch": ("Job", "batch/v1"),
}


@dataclass(frozen=True)
class _Custom:
    labels: Mapping[str, str]
    metric_labels: Mapping[str, str]
    value: float
    window_seconds: float
    timestamp: float


def described(resource: str, namespace: str | None, name: str) -> DescribedObject:
    """How a metric item names ``resource``/``name`` (kind and apiVersion from the resource)."""
    plural, _, group = resource.partition(".")
    kind, api_version = _KINDS.get(
        resource, (plural[:1].upper() + plural[1:-1], f"{group}/v1" if group else "v1")
    )
    return DescribedObject(kind, api_version, name, namespace)


class FakeProvider:
    """Values set by a test, served with the semantics of the real providers (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._custom: dict[tuple[str, str | None, str, str], _Custom] = {}
        self._external: dict[tuple[str, str], list[ExternalPoint]] = {}

    def set_custom(
        self,
        resource: str,
        name: str,
        metric: str,
        value: float,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        metric_labels: Mapping[str, str] | None = None,
        window_seconds: float = 60.0,
    ) -> None:
        """Serve ``value`` as ``metric`` of one object (replacing an earlier value)."""
        with self._lock:
            self._custom[(resource, namespace, name, metric)] = _Custom(
                dict(labels or {}),
                dict(metric_labels or {}),
                float(value),
                window_seconds,
                self._clock(),
            )

    def set_external(
        self,
        namespace: str,
        metric: str,
        value: float,
        *,
        labels: Mapping[str, str] | None = None,
        window_seconds: float = 60.0,
    ) -> None:
        """Add one item of an external metric in ``namespace`` (same labels: replaced)."""
        point = ExternalPoint(
            metric, dict(labels or {}), float(value), self._clock(), window_seconds
        )
        with self._lock:
            items = self._external.setdefault((namespace, metric), [])
            items[:] = [p for p in items if p.labels != point.labels] + [point]

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._custom.clear()
            self._external.clear()

    def _point(self, key: tuple[str, str | None, str, str], entry: _Custom) -> MetricPoint:
        resource, namespace, name, metric = key
        definition = MetricDefinition(
            metric,
            MetricKind.GAUGE,
            SeriesTerm(metric.replace(".", "_").replace("-", "_"), False),
            None,
            Aggregation.SUM,
            entry.window_seconds,
        )
        return MetricPoint(described(resource, namespace, name), definition, entry.value,
                           entry.timestamp)  # fmt: skip

    def get_metric_by_name(
        self,
        namespace: str | None,
        name: str,
        info: CustomMetricInfo,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> MetricPoint:
        """The value set for this object, if the selectors match it."""
        key = (info.group_resource, namespace, name, info.metric)
        with self._lock:
            entry = self._custom.get(key)
        if (
            entry is None
            or not selector.matches(entry.labels)
            or not metric_selector.matches(entry.metric_labels)
        ):
            where = f" in namespace {namespace}" if namespace else ""
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for "
                f"{info.group_resource} {name}{where}"
            )
        return self._point(key, entry)

    def get_metric_by_selector(
        self,
        namespace: str | None,
        selector: LabelSelector,
        info: CustomMetricInfo,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """Every object of the resource in ``namespace`` whose labels match, by name."""
        if not any(i.metric == info.metric for i in self.list_all_metrics()):
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for {info.group_resource}"
            )
        with self._lock:
            entries = sorted(self._custom.items(), key=lambda kv: kv[0][2])
        return [
            self._point(key, entry)
            for key, entry in entries
            if key[0] == info.group_resource
            and key[1] == namespace
            and key[3] == info.metric
            and selector.matches(entry.labels)
            and metric_selector.matches(entry.metric_labels)
        ]

    def list_all_metrics(self) -> list[CustomMetricInfo]:
        """One entry per (resource, metric) that has a value."""
        with self._lock:
            keys = list(self._custom)
        seen = {
            CustomMetricInfo(resource, namespace is not None, metric): None
            for resource, namespace, _, metric in keys
        }
        return list(seen)

    def get_external_metric(
        self, namespace: str, metric_selector: LabelSelector, info: ExternalMetricInfo
    ) -> list[ExternalPoint]:
        """The items set for this namespace whose labels match."""
        if info not in self.list_all_external_metrics():
            raise NotFoundError(f"the server could not find the external metric {info.metric}")
        with self._lock:
            items = list(self._external.get((namespace, info.metric), []))
        return [p for p in items if metric_selector.matches(p.labels)]

    def list_all_external_metrics(self) -> list[ExternalMetricInfo]:
        """One entry per external metric that has an item in some namespace."""
        with self._lock:
            names = [metric for _, metric in self._external]
        return [ExternalMetricInfo(m) for m in dict.fromkeys(names)]
