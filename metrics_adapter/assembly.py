"""AdapterRuntime: builds the adapter from settings (store, pods, sources, auth, app)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from flask import Flask
from prometheus_client import CollectorRegistry

from edl_sizing import SizingPolicy
from edl_sizing.events import EventRecorder, LogEventRecorder
from metrics_adapter.api.flask_app import create_app
from metrics_adapter.auth.authn import (
    Authenticator,
    ClientCertAuthenticator,
    DelegatingAuthenticator,
    RequestHeaderAuthenticator,
    TokenReviewAuthenticator,
    load_ca_bundle,
)
from metrics_adapter.auth.authz import (
    AlwaysAllowAuthorizer,
    Authorizer,
    SubjectAccessReviewAuthorizer,
)
from metrics_adapter.auth.trust import (
    ClientTrust,
    TlsClientTrust,
    TrustRefresher,
    trust_from_configmap,
)
from metrics_adapter.errors import ConfigError, SourceError
from metrics_adapter.filewatch import FileWatcher
from metrics_adapter.kube.client import make_api_client
from metrics_adapter.periodic import PeriodicTask
from metrics_adapter.providers.protocol import CompositeProvider, MetricsProvider
from metrics_adapter.providers.scraped_pods import ScrapedPodsProvider
from metrics_adapter.providers.sizing import SizingProvider
from metrics_adapter.scraping.catalogue import CatalogueHolder, MetricCatalogue
from metrics_adapter.scraping.evaluator import MetricEvaluator
from metrics_adapter.scraping.pod_registry import PodRegistry
from metrics_adapter.scraping.sources import Component
from metrics_adapter.scraping.sources.registry import SourceContext, source
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.selfmetrics import AdapterMetrics
from metrics_adapter.settings import (
    MAX_SAMPLES_PER_SERIES,
    STALE_AFTER_INTERVALS,
    STALE_AFTER_MIN_S,
    AdapterSettings,
    AuthMode,
)
from metrics_adapter.sizing import backends
from metrics_adapter.sizing.backends import BackendContext
from metrics_adapter.sizing.metrics import SizingMetrics
from metrics_adapter.sizing.observation import SERIES as SIZING_SERIES
from metrics_adapter.sizing.observation import ThroughputObserver
from metrics_adapter.sizing.sizer import Sizer

log = logging.getLogger(__name__)


def load_catalogue(settings: AdapterSettings, generation: int = 0) -> MetricCatalogue:
    """The configured catalogue, or the built-in one."""
    if settings.metrics_config is None:
        return MetricCatalogue.default()
    return MetricCatalogue.from_file(settings.metrics_config, generation)


class CatalogueReloader:
    """Swaps in the catalogue file's new content when it changes; a bad file is kept out."""

    def __init__(
        self, settings: AdapterSettings, holder: CatalogueHolder, metrics: AdapterMetrics
    ) -> None:
        self._settings = settings
        self._holder = holder
        self._metrics = metrics
        assert settings.metrics_config is not None
        self._watcher = FileWatcher(settings.metrics_config)
        self._watcher.prime()
        self._task = PeriodicTask("catalogue-reload", settings.reload_interval, self.check)

    def check(self) -> bool:
        """Reload when the file changed; returns whether a new catalogue is in force."""
        if not self._watcher.changed():
            return False
        try:
            fresh = load_catalogue(self._settings, self._holder.current.generation + 1)
        except ConfigError as e:
            self._metrics.catalogue_reloads.labels("error").inc()
            log.error("keeping the previous metric catalogue: %s", e)
            return False
        self._holder.replace(fresh)
        self._metrics.catalogue_reloads.labels("ok").inc()
        log.info("metric catalogue reloaded (generation %d)", fresh.generation)
        return True

    def start(self) -> None:
        """Start watching."""
        self._task.start()

    def stop(self) -> None:
        """Stop watching."""
        self._task.stop()


class AdapterRuntime:
    """Everything one adapter process runs, wired from settings.

    Args:
        settings: the options.
        trust: client-certificate CAs resolved at start (see :mod:`metrics_adapter.auth.trust`).
        clock: wall clock (injected for tests).
        api_client_factory: makes Kubernetes API clients (injected for tests).
    """

    def __init__(
        self,
        settings: AdapterSettings,
        trust: ClientTrust | None = None,
        clock: Callable[[], float] = time.time,
        api_client_factory: Callable[[Any], Any] = make_api_client,
        tls_trust: TlsClientTrust | None = None,
    ) -> None:
        self.settings = settings
        self._api_client_factory = api_client_factory
        self._api_clients: dict[Any, Any] = {}
        self._tls_trust = tls_trust
        self.metrics = AdapterMetrics(CollectorRegistry())
        self.catalogue = CatalogueHolder(
            load_catalogue(settings), SIZING_SERIES if settings.sizing else frozenset()
        )
        interval = settings.scrape_interval
        window = self.catalogue.current.max_window_seconds
        self.stale_after = settings.stale_after or max(
            STALE_AFTER_MIN_S, STALE_AFTER_INTERVALS * interval
        )
        capacity = settings.samples_per_series or min(
            MAX_SAMPLES_PER_SERIES, math.ceil(window / interval) + 2
        )
        expire = settings.expire_after or 2 * window + self.stale_after
        self.store = MetricStore(
            capacity,
            expire,
            clock,
            max_series_per_pod=settings.max_series_per_pod,
            prune_after=settings.series_prune_after or max(window, self.stale_after),
            on_refused=self.metrics.series_refused.inc,
        )
        self.pods = PodRegistry()
        self.service = ScrapedPodsProvider(
            self.pods, MetricEvaluator(self.store, self.stale_after, clock), self.catalogue
        )
        self.components: list[Component] = source(settings.source).build(
            SourceContext(
                settings,
                self.pods,
                self.store,
                self.catalogue,
                self.metrics,
                lambda: self.api_client(settings.kubeconfig),
            )
        )
        if settings.metrics_config is not None:
            self.components.append(CatalogueReloader(settings, self.catalogue, self.metrics))
        self.components.append(_Housekeeper(self, interval))
        providers: list[MetricsProvider] = [self.service]
        debug_pages: dict[str, Callable[[], dict[str, Any]]] = {}
        self.sizer: Sizer | None = None
        if settings.sizing:
            self.sizer, sizing = self._build_sizer(clock)
            providers.append(sizing)
            debug_pages["sizing"] = sizing.debug_page
        self.provider = CompositeProvider(providers)
        self.app: Flask = create_app(
            settings,
            self.provider,
            self.metrics,
            self._authenticator(trust or ClientTrust(), clock),
            self._authorizer(clock),
            ready=lambda: self.pods.synced,
            clock=clock,
            refresh_gauges=self.refresh_gauges,
            debug_pages=debug_pages,
        )

    def api_client(self, kubeconfig: Any) -> Any:
        """A (cached) Kubernetes client for ``kubeconfig`` (None: in-cluster)."""
        if kubeconfig not in self._api_clients:
            self._api_clients[kubeconfig] = self._api_client_factory(kubeconfig)
        return self._api_clients[kubeconfig]

    def _build_sizer(self, clock: Callable[[], float]) -> tuple[Sizer, SizingProvider]:
        """The sizer and its provider, from the named capacity source and history store."""
        s = self.settings
        ctx = BackendContext(
            s,
            lambda: self.api_client(s.kubeconfig),
            lambda name: self.metrics.source_errors.labels(name).inc(),
        )
        source = backends.build(
            backends.CAPACITY_SOURCES, s.sizing_capacity, "capacity source", ctx
        )
        history = backends.build(backends.HISTORY_STORES, s.sizing_history, "history store", ctx)
        if hasattr(source, "start"):
            self.components.append(source)
        if s.sizing_capacity == "kubernetes":
            from metrics_adapter.sizing.event_queue import QueuedEventRecorder
            from metrics_adapter.sizing.kube_events import KubernetesEventRecorder

            queued = QueuedEventRecorder(
                KubernetesEventRecorder(self.api_client(s.kubeconfig)), self.metrics.registry
            )
            self.components.append(queued)  # started before the sizer, stopped after it
            events: EventRecorder = queued
        else:
            events = LogEventRecorder()
        policy = sizing_policy(s)
        window = self.catalogue.current.max_window_seconds
        sizer = Sizer(
            source,
            history,
            policy,
            SizingMetrics(self.metrics.registry),
            events,
            clock,
            interval=s.sizing_interval,
            history_interval=s.sizing_history_interval,
            observer=ThroughputObserver(self.store, window),
            owners=getattr(source, "deployments_by_job", dict),
        )
        self.components.append(sizer)
        max_age = 3 * s.sizing_interval + 30.0
        return sizer, SizingProvider(sizer, clock, max_age)

    def _authenticator(
        self, trust: ClientTrust, clock: Callable[[], float]
    ) -> DelegatingAuthenticator:
        s = self.settings
        if s.authentication is AuthMode.NONE:
            return DelegatingAuthenticator([], allow_anonymous=True)
        requestheader = RequestHeaderAuthenticator(
            load_ca_bundle(trust.requestheader_ca_pem) if trust.requestheader_ca_pem else [],
            trust.allowed_names,
            trust.username_headers,
            trust.group_headers,
            trust.extra_prefixes,
        )
        client_cert = ClientCertAuthenticator(
            load_ca_bundle(trust.client_ca_pem) if trust.client_ca_pem else []
        )
        chain: list[Authenticator] = [requestheader, client_cert]
        from_cluster = not (
            s.requestheader_client_ca_file or s.client_ca_file or s.authentication_skip_lookup
        )
        if from_cluster:
            kubeconfig = s.authentication_kubeconfig or s.kubeconfig

            def read() -> ClientTrust:
                fresh = trust_from_configmap(self.api_client(kubeconfig))
                if s.requestheader_allowed_names:
                    fresh.allowed_names = s.requestheader_allowed_names
                return fresh

            self.components.append(
                TrustRefresher(
                    read, trust, requestheader, client_cert, self._tls_trust, s.auth_config_refresh
                )
            )
        try:
            from metrics_adapter.auth.kube_reviews import KubernetesTokenReviewer

            client = self.api_client(s.authentication_kubeconfig or s.kubeconfig)
            chain.append(
                TokenReviewAuthenticator(KubernetesTokenReviewer(client), s.auth_cache_ttl, clock)
            )
        except SourceError as e:
            log.warning("bearer tokens will not be accepted: %s", e)
        return DelegatingAuthenticator(chain, allow_anonymous=True)

    def _authorizer(self, clock: Callable[[], float]) -> Authorizer:
        s = self.settings
        if s.authorization is AuthMode.NONE:
            return AlwaysAllowAuthorizer()
        from metrics_adapter.auth.kube_reviews import KubernetesAccessReviewer

        client = self.api_client(s.authorization_kubeconfig or s.kubeconfig)
        return SubjectAccessReviewAuthorizer(
            KubernetesAccessReviewer(client), clock, s.auth_cache_ttl, s.auth_cache_ttl
        )

    def refresh_gauges(self) -> None:
        """Update the store-size gauges (on each /metrics scrape and housekeeping round)."""
        stats = self.store.stats()
        self.metrics.pods.set(len(self.pods))
        self.metrics.store_pods.set(stats.pods)
        self.metrics.store_series.set(stats.series)
        self.metrics.store_samples.set(stats.samples)
        self.metrics.store_bytes.set(stats.bytes)

    def start(self) -> None:
        """Start every background component."""
        for component in self.components:
            component.start()

    def stop(self) -> None:
        """Stop every background component."""
        for component in reversed(self.components):
            component.stop()


class _Housekeeper:
    """Expires silent pods' data."""

    def __init__(self, runtime: AdapterRuntime, interval: float) -> None:
        self._runtime = runtime
        self._task = PeriodicTask("housekeeper", max(1.0, interval), self.run_once)

    def run_once(self) -> None:
        """Drop expired pods from the store."""
        expired = self._runtime.store.expire()
        if expired:
            self._runtime.metrics.expired.inc(len(expired))
            log.info("expired data of %d silent pods", len(expired))

    def start(self) -> None:
        """Start."""
        self._task.start()

    def stop(self) -> None:
        """Stop."""
        self._task.stop()


def sizing_policy(settings: AdapterSettings) -> SizingPolicy:
    """The sizing policy the settings ask for (the adapter's, and a bench replaying its round)."""
    return SizingPolicy(
        headroom=settings.sizing_headroom,
        hold_off_s=settings.sizing_hold_off,
        payback_s=settings.sizing_payback,
        exploration=settings.sizing_exploration,
    )
