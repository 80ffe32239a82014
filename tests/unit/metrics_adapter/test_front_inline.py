"""The front end answers on its event loop, and defers to a thread what would wait on the network.

The real app (helpers.build) behind the real front end (WsgiHandler on HttpServer) on
127.0.0.1, with a SubjectAccessReview authorizer whose reviewer records the thread it is
called on: an uncached review must run on an app thread (never on the loop), a cached decision is
answered on the loop, the app itself runs once per request and on the loop, and a list too
large to buffer still streams whole.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric

from edl_common.http.server import HttpServer, ServerLimits
from metrics_adapter.api.filters import RequestFilters
from metrics_adapter.api.flask_app import FILTERS_EXTENSION
from metrics_adapter.auth.authz import SubjectAccessReviewAuthorizer
from metrics_adapter.auth.identity import RequestAttributes
from metrics_adapter.http.server import WsgiHandler, bind
from tests.unit.metrics_adapter.helpers import (
    ManualClock,
    agent_samples,
    build,
    trainer,
    trainers_at_ten_samples,
)

PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/samples_per_second"


class RecordingReviewer:
    def __init__(self) -> None:
        self.threads: list[str] = []

    def review(self, attributes: RequestAttributes) -> tuple[bool, str]:
        self.threads.append(threading.current_thread().name)
        return True, ""


@pytest.fixture
def served() -> Iterator[tuple[int, RecordingReviewer, list[str], list[str]]]:
    pods = [trainer(f"trainer-{i}") for i in range(2500)]
    reviewer = RecordingReviewer()
    clock = ManualClock()
    h = build(pods, authorizer=SubjectAccessReviewAuthorizer(reviewer, clock))
    for p in pods:
        h.feed(p, agent_samples(0, 0))
    h.clock.t += 10
    clock.t = h.clock.t
    for p in pods:
        h.feed(p, agent_samples(100, 10))
    loop_thread: list[str] = []
    calls: list[str] = []  # the thread of each call into the app behind its filters
    filters = h.app.extensions[FILTERS_EXTENSION]
    assert isinstance(filters, RequestFilters)
    wsgi = filters.app

    def recording(environ: Any, start_response: Any) -> Any:
        calls.append(threading.current_thread().name)
        return wsgi(environ, start_response)

    filters.app = recording
    with front_end(h.app) as (port, loop_name):
        loop_thread.append(loop_name)
        yield port, reviewer, loop_thread, calls


@contextmanager
def front_end(app: Any) -> Iterator[tuple[int, str]]:
    """The real front end serving ``app`` on 127.0.0.1: its port and its loop's thread name."""
    handler = WsgiHandler(app, threads=2, max_inflight=128, scheme="http")
    front = HttpServer(handler, ServerLimits())
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["loop"] = asyncio.get_running_loop()
        box["stop"] = stop = asyncio.Event()
        ready.set()
        await front.serve(sock, stop)

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="front-loop")
    thread.start()
    assert ready.wait(10)
    try:
        yield port, thread.name
    finally:
        loop = box["loop"]
        assert isinstance(loop, asyncio.AbstractEventLoop)
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(15)
        handler.close()


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_an_uncached_review_runs_on_a_thread_and_a_cached_one_on_the_loop(
    served: tuple[int, RecordingReviewer, list[str], list[str]],
) -> None:
    port, reviewer, loop_thread, calls = served
    status, body = get(port, "/apis/custom.metrics.k8s.io/v1beta2")
    assert status == 200 and json.loads(body)["kind"] == "APIResourceList"
    assert len(reviewer.threads) == 1 and reviewer.threads[0] != loop_thread[0]
    assert calls == loop_thread  # the app ran once, on the loop, after the review
    status, body = get(port, "/apis/custom.metrics.k8s.io/v1beta2")  # decision cached
    assert status == 200 and len(reviewer.threads) == 1
    assert calls == loop_thread * 2  # answered on the loop


def test_a_list_too_large_to_buffer_streams_whole(
    served: tuple[int, RecordingReviewer, list[str], list[str]],
) -> None:
    port, reviewer, loop_thread, _ = served
    for _ in range(2):  # the review deferred to a thread, then the cached decision inline
        status, body = get(port, PODS)
        assert status == 200
        items = json.loads(body)["items"]
        assert len(items) == 2500 and {i["value"] for i in items} == {"10"}
    assert all(t != loop_thread[0] for t in reviewer.threads)


class GatedCollector:
    """A collector whose ``collect`` waits until the test opens the gate: a slow /metrics page."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()

    def collect(self) -> Iterator[Metric]:
        self.entered.set()
        self.gate.wait(60)
        yield GaugeMetricFamily("edl_test_gated", "Rendered once the gate opened.", value=1)


def test_the_whole_metrics_page_renders_off_the_loop_and_api_reads_go_on_meanwhile() -> None:
    h = trainers_at_ten_samples(3)
    gated = GatedCollector()
    h.metrics.registry.register(gated)
    page: dict[str, Any] = {}
    with front_end(h.app) as (port, _):
        scrape = threading.Thread(target=lambda: page.update(answer=get(port, "/metrics")))
        scrape.start()
        try:
            assert gated.entered.wait(30), "the /metrics request never reached its collectors"
            # The page is still being rendered: an HPA's read is answered all the same.
            status, body = get(port, PODS)
            assert status == 200 and len(json.loads(body)["items"]) == 3
            assert get(port, "/healthz") == (200, b"ok")
            assert "answer" not in page
        finally:
            gated.gate.set()
            scrape.join(30)
    status, body = page["answer"]
    assert status == 200 and b"edl_test_gated 1.0" in body


def test_the_metrics_page_runs_on_an_app_thread_and_the_api_on_the_loop(
    served: tuple[int, RecordingReviewer, list[str], list[str]],
) -> None:
    port, _, loop_thread, calls = served
    get(port, "/apis/custom.metrics.k8s.io/v1beta2")  # the review, once, on a thread
    status, body = get(port, "/metrics")
    assert status == 200 and b"edl_adapter_request_duration_seconds" in body
    assert calls[-1] != loop_thread[0]
    status, _ = get(port, "/apis/custom.metrics.k8s.io/v1beta2")
    assert status == 200 and calls[-1] == loop_thread[0]
