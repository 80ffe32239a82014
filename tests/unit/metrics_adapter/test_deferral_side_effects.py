"""The blocking rule, enforced: filters deferred at `may_block` leave no trace behind.

The front end runs the request filters (authentication, authorisation) on its event loop;
code about to wait on the network calls `blocking.may_block`, which raises there, and the
front end runs the filters again on a thread, then the app once. That is only correct if
nothing before `may_block` changed anything. Checked here by difference: two identical
adapters answer the same sequence of requests, one as the front end does (filters on the
loop first, again on a thread where they must wait, then the app) and one through the whole
WSGI chain on a thread; after every request both must agree on the answer, the
self-metrics, the reviews made and the caches. A counter bumped, a cache filled or a review
sent before `may_block` makes them differ.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import generate_latest
from werkzeug.test import EnvironBuilder

from metrics_adapter.api.filters import RequestFilters
from metrics_adapter.api.flask_app import FILTERS_EXTENSION
from metrics_adapter.auth.authn import DelegatingAuthenticator, TokenReviewAuthenticator
from metrics_adapter.auth.authz import SubjectAccessReviewAuthorizer
from metrics_adapter.auth.blocking import WouldBlock, on_loop
from metrics_adapter.auth.identity import RequestAttributes
from tests.unit.metrics_adapter.helpers import (
    FakeTokenReviewer,
    Harness,
    ManualClock,
    agent_samples,
    build,
    trainer,
)

API = "/apis/custom.metrics.k8s.io/v1beta2"
PODS = f"{API}/namespaces/ml/pods/*/samples_per_second"
# Values that depend on when or how long a call ran, not on what it did.
_TIMING = re.compile(
    r"^(edl_adapter_request_duration_seconds_(sum|bucket)|process_|python_gc|\S+_created)"
)


class CountingReviewer:
    def __init__(self) -> None:
        self.calls = 0

    def review(self, attributes: RequestAttributes) -> tuple[bool, str]:
        self.calls += 1
        return attributes.user.name == "bob", "bob only"


class Adapter:
    def __init__(self) -> None:
        pods = [trainer("trainer-0"), trainer("trainer-1")]
        self.clock = ManualClock()
        self.tokens = FakeTokenReviewer()
        self.access = CountingReviewer()
        self.authn = TokenReviewAuthenticator(self.tokens, 10.0, self.clock)
        self.authz = SubjectAccessReviewAuthorizer(self.access, self.clock)
        self.h: Harness = build(pods, DelegatingAuthenticator([self.authn]), self.authz)
        for p in pods:
            self.h.feed(p, agent_samples(0, 0))
        self.h.clock.t += 10
        for p in pods:
            self.h.feed(p, agent_samples(100, 10))

    def call(self, path: str, token: str | None, loop_first: bool) -> tuple[int, bytes, bool]:
        """Answer one request; (status, body, whether its filters were deferred)."""
        environ = self._environ(path, token)
        if not loop_first:
            return (*self._run(self.h.app, environ), False)
        filters = self.h.app.extensions[FILTERS_EXTENSION]
        assert isinstance(filters, RequestFilters)
        deferred = False
        try:
            with on_loop():
                denial = filters.admit(environ)
        except WouldBlock:
            deferred = True
            denial = filters.admit(environ)
        if denial is not None:
            return denial.code, denial.body, deferred
        return (*self._run(filters.app, environ), deferred)

    def state(self) -> dict[str, Any]:
        exposition = generate_latest(self.h.metrics.registry).decode()
        return {
            "metrics": [ln for ln in exposition.splitlines() if not _TIMING.match(ln)],
            "token reviews": self.tokens.calls,
            "access reviews": self.access.calls,
            "tokens cached": self.authn.cached,
            "decisions made": self.authz.reviews,
        }

    def _environ(self, path: str, token: str | None) -> dict[str, Any]:
        headers = [("Authorization", f"Bearer {token}")] if token else []
        environ: dict[str, Any] = EnvironBuilder(path=path, headers=headers).get_environ()
        environ["RAW_URI"] = path
        return environ

    def _run(self, app: Any, environ: dict[str, Any]) -> tuple[int, bytes]:
        started: list[str] = []

        def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
            started.append(status)
            return lambda data: None

        result = app(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            getattr(result, "close", lambda: None)()
        return int(started[0].split()[0]), body


REQUESTS = [
    (PODS, "good"),  # TokenReview not cached: defers in authentication
    (PODS, "good"),  # token and decision cached: answered on the loop
    (API, "good"),  # a new SubjectAccessReview: defers in authorisation
    (PODS, "bad"),  # a token the reviewer refuses (401), not cached yet
    (PODS, "bad"),
    (PODS, None),  # anonymous: a SubjectAccessReview for system:anonymous
    ("/healthz", None),
    (f"{API}/namespaces/ml/pods/trainer-0/samples_per_second", "good"),
]


@pytest.mark.parametrize("clock_step", [0.0, 11.0])  # 11 s: every cache entry expires
def test_a_deferred_request_leaves_the_state_as_a_thread_only_run_does(clock_step: float) -> None:
    on_loop_first, threads_only = Adapter(), Adapter()
    deferred = 0
    for path, token in REQUESTS * 2:
        for a in (on_loop_first, threads_only):
            a.clock.t += clock_step
            a.h.clock.t = a.clock.t
        got = on_loop_first.call(path, token, loop_first=True)
        want = threads_only.call(path, token, loop_first=False)
        deferred += got[2]
        assert got[:2] == want[:2], (path, token)
        assert on_loop_first.state() == threads_only.state(), (path, token)
    assert deferred >= 4  # the rule was exercised: requests did defer
