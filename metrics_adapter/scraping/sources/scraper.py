"""PodScraper: scrapes every pod's agent concurrently; a bad target only hurts itself."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests
import urllib3.exceptions

from metrics_adapter.errors import ScrapeError
from metrics_adapter.periodic import PeriodicTask
from metrics_adapter.scraping.catalogue import CatalogueHolder
from metrics_adapter.scraping.pod_registry import PodKey, PodRegistry, PodTarget
from metrics_adapter.scraping.sources.deadline_session import DeadlineSession
from metrics_adapter.scraping.sources.exposition import ExpositionScan, TooManySeries
from metrics_adapter.scraping.sources.registry import SourceContext
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.selfmetrics import AdapterMetrics

log = logging.getLogger(__name__)


class PodScraper:
    """Every ``interval``, GETs each pod's ``scrape_url`` and stores the catalogue's series.

    Each scrape runs on a worker pool with a connect/read timeout *and* a total deadline
    (``timeout``, the response head included: ``session`` is a `DeadlineSession`), and a
    body limit (``max_bytes``); a pod still in flight is not scraped again.
    Failures are counted by reason; the pod's samples simply stop arriving, go stale and expire.
    A scrape with more samples of the needed series than the store keeps per pod is refused
    whole (``too_many_series``) before its samples are even built.
    """

    def __init__(
        self,
        pods: PodRegistry,
        store: MetricStore,
        catalogue: CatalogueHolder,
        metrics: AdapterMetrics,
        session: DeadlineSession,
        interval: float,
        timeout: float,
        max_bytes: int = 8 << 20,
        concurrency: int = 32,
    ) -> None:
        self._pods = pods
        self._store = store
        self._catalogue = catalogue
        self._metrics = metrics
        self._session = session
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="scrape")
        self._inflight: set[PodKey] = set()
        self._lock = threading.Lock()
        self._task = PeriodicTask("scraper", interval, self.scrape_round)

    def start(self) -> None:
        """Start scraping."""
        self._task.start()

    def stop(self) -> None:
        """Stop scraping (in-flight scrapes end at their deadline)."""
        self._task.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def scrape_round(self) -> int:
        """Submit one scrape per idle target; returns how many were submitted."""
        submitted = 0
        for pod in self._pods.all():
            if not pod.scrape_url:
                continue
            with self._lock:
                if pod.key in self._inflight:
                    continue
                self._inflight.add(pod.key)
            self._pool.submit(self._scrape_and_release, pod)
            submitted += 1
        return submitted

    def _scrape_and_release(self, pod: PodTarget) -> None:
        try:
            self.scrape(pod)
        finally:
            with self._lock:
                self._inflight.discard(pod.key)

    def scrape(self, pod: PodTarget) -> bool:
        """Scrape one pod now; returns whether samples were stored."""
        self._metrics.scrapes.inc()
        started = time.monotonic()
        needed = self._catalogue.needed_series
        try:
            scan = ExpositionScan(needed.__contains__, self._store.max_series_per_pod)
            self._fetch(pod.scrape_url or "", scan)
            samples = scan.samples()
        except TooManySeries as e:
            self._metrics.scrape_errors.labels(e.reason).inc()
            self._store.refuse(pod.key, e.limit + 1)
            return False
        except ScrapeError as e:
            self._metrics.scrape_errors.labels(e.reason).inc()
            log.debug("scrape of %s/%s failed: %s", pod.namespace, pod.name, e)
            return False
        finally:
            self._metrics.scrape_duration.observe(time.monotonic() - started)
        if self._pods.get(pod.key) is None:
            return False  # deleted while we scraped
        self._store.ingest(pod.key, samples)
        return True

    def _fetch(self, url: str, scan: ExpositionScan) -> None:
        """GETs ``url`` and feeds its body to ``scan`` as it arrives (never held whole)."""
        deadline = time.monotonic() + self._timeout
        try:
            with (
                self._session.deadline(deadline),
                self._session.get(
                    url,
                    timeout=(min(self._timeout, 3.0), self._timeout),
                    stream=True,
                    headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"},
                    allow_redirects=False,
                ) as resp,
            ):
                if resp.status_code != 200:
                    raise ScrapeError(f"GET {url}: HTTP {resp.status_code}", "status")
                size = 0
                while True:
                    chunk = resp.raw.read1(65536)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > self._max_bytes:
                        raise ScrapeError(
                            f"GET {url}: body over {self._max_bytes} bytes", "too_large"
                        )
                    if time.monotonic() > deadline:
                        raise ScrapeError(
                            f"GET {url}: over the {self._timeout}s deadline", "timeout"
                        )
                    scan.feed(chunk)
                if time.monotonic() >= deadline:  # an end the deadline session forced
                    raise ScrapeError(f"GET {url}: over the {self._timeout}s deadline", "timeout")
        except requests.Timeout as e:
            raise ScrapeError(f"GET {url}: timed out", "timeout") from e
        except urllib3.exceptions.TimeoutError as e:
            raise ScrapeError(f"GET {url}: timed out", "timeout") from e
        except (requests.RequestException, OSError, ValueError, urllib3.exceptions.HTTPError) as e:
            if time.monotonic() >= deadline:  # the deadline session shut the connection
                raise ScrapeError(
                    f"GET {url}: over the {self._timeout}s deadline", "timeout"
                ) from e
            raise ScrapeError(f"GET {url}: {e}", "connect") from e


def scrape_url_for(address: str, path: str = "/metrics", scheme: str = "http") -> str:
    """``host:port`` (or a full URL) to a scrape URL."""
    if "://" in address:
        return address
    return f"{scheme}://{address}{path}"


def scraper_for(ctx: SourceContext) -> PodScraper:
    """The scraper of the registry's pods, as the settings ask (static and Kubernetes use it)."""
    s = ctx.settings
    return PodScraper(
        ctx.pods,
        ctx.store,
        ctx.catalogue,
        ctx.metrics,
        DeadlineSession(pool_size=s.scrape_concurrency),
        interval=s.scrape_interval,
        timeout=s.scrape_timeout,
        max_bytes=s.max_scrape_bytes,
        concurrency=s.scrape_concurrency,
    )
