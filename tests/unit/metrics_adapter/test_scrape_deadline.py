"""A scrape ends at its total deadline even when the target trickles its response head.

Before, urllib3's read timeout (per `recv`) was the only bound on the head: a target sending
it a byte at a time held a scrape thread for as long as it kept sending, and as many such
pods as `--scrape-concurrency` stopped every scrape. The target here trickles for 60 s and
then answers properly, so without the deadline the scrape would succeed. The deadline (8 s)
is far from both: the trickle, and a good scrape on a loaded machine.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry
from urllib3.connection import HTTPConnection

from metrics_adapter.scraping.catalogue import CatalogueHolder, MetricCatalogue
from metrics_adapter.scraping.pod_registry import PodRegistry, PodTarget
from metrics_adapter.scraping.sources.deadline_session import DeadlineSession, Watchdog
from metrics_adapter.scraping.sources.scraper import PodScraper
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.selfmetrics import AdapterMetrics

EXPOSITION = b"edl_trainer_samples_total 7\n"
HUNG_UP_MID_HEAD = threading.Event()


def _answer(conn: socket.socket) -> None:
    """Answer requests on one keep-alive connection until the client closes it.

    A target that closed after each answer would race the scraper's connection pool: on a
    loaded machine the close can land after the next request went out on the pooled
    connection, and that scrape fails for a reason this test is not about.
    """
    with conn:
        conn.settimeout(60)
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                try:
                    chunk = conn.recv(4096)
                except OSError:  # an idle keep-alive connection outlived its test: done
                    return
                if not chunk:
                    return
                data += chunk
            head, _, data = data.partition(b"\r\n\r\n")
            try:
                if head.startswith(b"GET /slow "):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow")  # a header name, a byte at a time
                    for _ in range(300):  # 60 s of a header, a byte every 0.2 s
                        try:
                            conn.sendall(b"a")
                        except OSError:
                            HUNG_UP_MID_HEAD.set()
                            return
                        time.sleep(0.2)  # the hostile target's own pace
                    conn.sendall(b": x\r\n")
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                conn.sendall(b"Content-Length: %d\r\n\r\n" % len(EXPOSITION) + EXPOSITION)
            except OSError:
                return  # the scraper gave up on us


@dataclass
class Target:
    port: int
    accepted: list[socket.socket] = field(default_factory=list)  # each connection opened to it


@pytest.fixture
def target() -> Iterator[Target]:
    """`/slow`: the head trickled for 60 s; anything else: answered at once."""
    server = socket.create_server(("127.0.0.1", 0))
    served = Target(int(server.getsockname()[1]))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            served.accepted.append(conn)
            threading.Thread(target=_answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield served
    stop.set()
    thread.join(10)
    server.close()


def _scraper(registry: PodRegistry, store: MetricStore, metrics: AdapterMetrics) -> PodScraper:
    catalogue = CatalogueHolder(MetricCatalogue.default())
    return PodScraper(
        registry, store, catalogue, metrics, DeadlineSession(), interval=60.0, timeout=8.0
    )


@pytest.mark.slow
def test_a_trickled_head_ends_at_the_deadline_as_a_timeout(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    registry = PodRegistry()
    store = MetricStore(capacity=8, expire_after=600, clock=time.time)
    metrics = AdapterMetrics(CollectorRegistry())
    scraper = _scraper(registry, store, metrics)
    slow = PodTarget("ml", "slow", scrape_url=f"http://127.0.0.1:{target.port}/slow")
    fine = PodTarget("ml", "fine", scrape_url=f"http://127.0.0.1:{target.port}/metrics")
    registry.upsert(slow)
    registry.upsert(fine)
    assert scraper.scrape(slow) is False
    assert HUNG_UP_MID_HEAD.wait(60)  # the scraper closed it; the head was still arriving
    timeouts = metrics.registry.get_sample_value(
        "edl_adapter_scrape_errors_total", {"reason": "timeout"}
    )
    assert timeouts == 1.0
    # the same session goes on scraping (a fresh and a reused connection) within deadlines
    assert scraper.scrape(fine) is True
    assert scraper.scrape(fine) is True
    assert len(target.accepted) == 2  # the cut one, and one kept alive for both good scrapes
    windows = store.windows(fine.key, "edl_trainer_samples_total")
    assert [w.samples()[-1][1] for _, w in windows] == [7.0]
    # the cut-short head is counted, not logged with urllib3's traceback
    assert "Failed to parse headers" not in caplog.text


class _RecordingWatchdog(Watchdog):
    def __init__(self) -> None:
        super().__init__()
        self.deadlines: list[float] = []

    def arm(self, conn: HTTPConnection, deadline: float) -> None:
        self.deadlines.append(deadline)
        super().arm(conn, deadline)


def test_each_session_arms_its_own_watchdog_with_the_scrapes_deadline(target: Target) -> None:
    """No watchdog shared between sessions: the one a session is given is the one armed."""
    watchdog = _RecordingWatchdog()
    session = DeadlineSession(watchdog=watchdog)
    catalogue = CatalogueHolder(MetricCatalogue.default())
    registry = PodRegistry()
    store = MetricStore(capacity=8, expire_after=600, clock=time.time)
    scraper = PodScraper(registry, store, catalogue, AdapterMetrics(CollectorRegistry()),
                         session, interval=60.0, timeout=8.0)  # fmt: skip
    fine = PodTarget("ml", "fine", scrape_url=f"http://127.0.0.1:{target.port}/metrics")
    registry.upsert(fine)
    before = time.monotonic()
    assert scraper.scrape(fine) is True
    assert scraper.scrape(fine) is True  # the reused connection is armed again
    assert len(target.accepted) == 1
    assert len(watchdog.deadlines) == 2
    assert all(before + 8.0 <= d <= time.monotonic() + 8.0 for d in watchdog.deadlines)
    assert DeadlineSession().watchdog is not watchdog
    # outside a deadline nothing is armed (a plain request through the same session)
    assert session.get(f"http://127.0.0.1:{target.port}/metrics", timeout=30).status_code == 200
    assert len(watchdog.deadlines) == 2
