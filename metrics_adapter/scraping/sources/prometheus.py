"""PrometheusSource: samples from instant queries against a real Prometheus HTTP API.

Every interval one instant query fetches the newest sample of each series the catalogue
needs (``{__name__=~"a|b|c"}``); samples keep Prometheus's timestamps, so rates and
staleness work exactly as with direct scraping. Pods come from the series' ``namespace`` and
``pod`` labels (their other target labels become pod labels, the ``deployment`` label the
owner) unless a static pods file lists them.
"""

from __future__ import annotations

import logging
from typing import Any

import requests

from metrics_adapter.errors import ConfigError, SourceError
from metrics_adapter.kube.selectors import validate_key, validate_value
from metrics_adapter.periodic import PeriodicTask
from metrics_adapter.scraping.catalogue import CatalogueHolder
from metrics_adapter.scraping.pod_registry import OwnerRef, PodKey, PodRegistry, PodTarget
from metrics_adapter.scraping.sources import Component
from metrics_adapter.scraping.sources.registry import SourceContext, SourceDefinition
from metrics_adapter.scraping.sources.static import static_discovery
from metrics_adapter.scraping.store import MetricStore, Sample
from metrics_adapter.selfmetrics import AdapterMetrics
from metrics_adapter.settings import AdapterSettings

log = logging.getLogger(__name__)

# Labels that describe a series rather than the pod it came from.
_SERIES_LABELS = frozenset({"__name__", "instance", "job", "gpu", "phase", "le", "quantile"})


class PrometheusSource:
    """Feeds the store (and optionally the pod registry) from Prometheus instant queries."""

    def __init__(
        self,
        base_url: str,
        pods: PodRegistry,
        store: MetricStore,
        catalogue: CatalogueHolder,
        metrics: AdapterMetrics,
        session: requests.Session,
        interval: float,
        timeout: float,
        discover_pods: bool = True,
        namespace_label: str = "namespace",
        pod_label: str = "pod",
        owner_label: str = "deployment",
    ) -> None:
        self._url = base_url.rstrip("/") + "/api/v1/query"
        self._pods = pods
        self._store = store
        self._catalogue = catalogue
        self._metrics = metrics
        self._session = session
        self._timeout = timeout
        self._discover = discover_pods
        self._ns_label = namespace_label
        self._pod_label = pod_label
        self._owner_label = owner_label
        self._task = PeriodicTask("prometheus", interval, self._collect_logged)

    def query(self) -> list[dict[str, Any]]:
        """Run the instant query; returns the vector result.

        Raises:
            SourceError: on transport errors or a non-success answer.
        """
        names = sorted(self._catalogue.needed_series)
        promql = '{__name__=~"' + "|".join(names) + '"}'
        try:
            resp = self._session.get(self._url, params={"query": promql}, timeout=self._timeout)
            body = resp.json()
        except (requests.RequestException, ValueError) as e:
            raise SourceError(f"Prometheus query failed: {e}") from e
        if resp.status_code != 200 or body.get("status") != "success":
            raise SourceError(
                f"Prometheus query failed: HTTP {resp.status_code}: {body.get('error')}"
            )
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise SourceError(f"unexpected Prometheus result type {data.get('resultType')!r}")
        result = data.get("result") or []
        return [r for r in result if isinstance(r, dict)]

    def collect_once(self) -> int:
        """Query and ingest; returns the number of pods with samples."""
        by_pod: dict[PodKey, list[Sample]] = {}
        pod_labels: dict[PodKey, dict[str, str]] = {}
        for series in self.query():
            labels = {str(k): str(v) for k, v in (series.get("metric") or {}).items()}
            ns, pod = labels.get(self._ns_label), labels.get(self._pod_label)
            value = series.get("value")
            if not ns or not pod or not isinstance(value, list) or len(value) != 2:
                continue
            try:
                ts, number = float(value[0]), float(value[1])
            except (TypeError, ValueError):
                continue
            key = PodKey(ns, pod)
            own = {k: v for k, v in labels.items() if k not in (self._ns_label, self._pod_label)}
            series_labels = {k: v for k, v in own.items() if k != "__name__"}
            by_pod.setdefault(key, []).append(Sample(labels["__name__"], series_labels, number, ts))
            pod_labels.setdefault(
                key,
                {
                    k: v
                    for k, v in own.items()
                    if k not in _SERIES_LABELS and not validate_key(k) and not validate_value(v)
                },
            )
        if self._discover:
            targets = [self._target(key, pod_labels[key]) for key in by_pod]
            for gone in self._pods.replace_all(targets):
                self._store.drop(gone)
        for key, samples in by_pod.items():
            if self._pods.get(key) is not None:
                self._store.ingest(key, samples)
        return len(by_pod)

    def _target(self, key: PodKey, labels: dict[str, str]) -> PodTarget:
        owner = labels.get(self._owner_label)
        owners = (OwnerRef("Deployment", "apps", owner),) if owner else ()
        return PodTarget(key.namespace, key.name, labels, owners)

    def _collect_logged(self) -> None:
        try:
            self.collect_once()
        except SourceError as e:
            self._metrics.source_errors.labels("prometheus").inc()
            log.warning("%s", e)

    def start(self) -> None:
        """Start querying."""
        self._task.start()

    def stop(self) -> None:
        """Stop querying."""
        self._task.stop()


def _check(settings: AdapterSettings) -> None:
    if not settings.prometheus_url:
        raise ConfigError("--source prometheus needs --prometheus-url")


def _build(ctx: SourceContext) -> list[Component]:
    _check(ctx.settings)
    s = ctx.settings
    assert s.prometheus_url is not None
    components: list[Component] = []
    if s.static_file is not None:
        components.append(static_discovery(ctx, s.static_file))
    components.append(
        PrometheusSource(
            s.prometheus_url,
            ctx.pods,
            ctx.store,
            ctx.catalogue,
            ctx.metrics,
            requests.Session(),
            interval=s.scrape_interval,
            timeout=s.scrape_timeout,
            discover_pods=s.static_file is None,
            namespace_label=s.prometheus_namespace_label,
            pod_label=s.prometheus_pod_label,
            owner_label=s.prometheus_owner_label,
        )
    )
    return components


SOURCE = SourceDefinition(_check, _build)
"""``--source prometheus``: values (and, without ``--static-file``, the pods) from
Prometheus' instant queries."""
