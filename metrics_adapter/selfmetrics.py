"""The adapter's own Prometheus metrics, on an explicit registry."""

from __future__ import annotations

import os
import platform

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.process_collector import ProcessCollector

import metrics_adapter

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_AGE_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)


class AdapterMetrics:
    """Request latency by route/code, scrape outcomes, sample age and store size."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        ProcessCollector(registry=registry)
        Info(
            "edl_adapter_build", "Version of the adapter (1 per process).", registry=registry
        ).info(
            {
                "version": metrics_adapter.__version__,
                "revision": os.environ.get("EDL_BUILD_REVISION", "unknown"),
                "python_version": platform.python_version(),
            }
        )
        self.request_duration = Histogram(
            "edl_adapter_request_duration_seconds",
            "Time to answer an API request, by route and HTTP code.",
            ["route", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.scrapes = Counter(
            "edl_adapter_scrapes_total", "Scrapes of trainer agents attempted.", registry=registry
        )
        self.scrape_errors = Counter(
            "edl_adapter_scrape_errors_total",
            "Scrapes that failed, by reason "
            "(timeout, connect, status, parse, too_large, too_many_series).",
            ["reason"],
            registry=registry,
        )
        self.scrape_duration = Histogram(
            "edl_adapter_scrape_duration_seconds",
            "Duration of one scrape of one agent.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.sample_age = Histogram(
            "edl_adapter_sample_age_seconds",
            "Age of the newest sample behind each value served.",
            buckets=_AGE_BUCKETS,
            registry=registry,
        )
        self.source_errors = Counter(
            "edl_adapter_source_errors_total",
            "Failures of the pod discovery or Prometheus source.",
            ["source"],
            registry=registry,
        )
        self.catalogue_reloads = Counter(
            "edl_adapter_catalogue_reloads_total",
            "Metric catalogue reloads, by result (ok, error).",
            ["result"],
            registry=registry,
        )
        self.pods = Gauge("edl_adapter_pods", "Pods known to the adapter.", registry=registry)
        self.store_pods = Gauge(
            "edl_adapter_store_pods", "Pods with samples in the store.", registry=registry
        )
        self.store_series = Gauge(
            "edl_adapter_store_series", "Series held in the store.", registry=registry
        )
        self.store_samples = Gauge(
            "edl_adapter_store_samples", "Samples held in the store.", registry=registry
        )
        self.store_bytes = Gauge(
            "edl_adapter_store_bytes", "Approximate memory held by the store.", registry=registry
        )
        self.series_refused = Counter(
            "edl_adapter_series_refused_total",
            "New label sets refused because their pod is at --max-series-per-pod.",
            registry=registry,
        )
        self.expired = Counter(
            "edl_adapter_expired_pods_total",
            "Pods whose data expired (stale for longer than the expiry).",
            registry=registry,
        )
