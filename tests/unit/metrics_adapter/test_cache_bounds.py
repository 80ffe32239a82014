"""Every cache keyed by client input stays within its byte budget, whatever the client sends.

Distinct ``metricLabelSelector`` values once grew the adapter by 650 MB at 1,000 pods (issue
25): each kept a whole answer. The TokenReview and SubjectAccessReview caches are bounded in
bytes too (a review's key holds the client's path) and keep their TTL. The budgets hold only
if the estimates err high, so tests measure what an answer, and the review cache, really hold
(tracemalloc) beside the estimate.
"""

from __future__ import annotations

import tracemalloc

import pytest

from metrics_adapter.api.routes import PARSED_PATHS_MAX_BYTES, parse_path
from metrics_adapter.api.wire_shapes import MetricListRenderer
from metrics_adapter.auth.attributes import request_attributes
from metrics_adapter.auth.authn import TOKEN_REVIEWS_MAX_BYTES, TokenReviewAuthenticator
from metrics_adapter.auth.authz import ACCESS_REVIEWS_MAX_BYTES, SubjectAccessReviewAuthorizer
from metrics_adapter.auth.identity import RequestAttributes, UserInfo
from metrics_adapter.bounded_cache import ByteBoundedLRU
from metrics_adapter.errors import UnauthorizedError
from metrics_adapter.kube.selectors import PARSED_SELECTORS_MAX_BYTES, LabelSelector, _parse_cached
from metrics_adapter.providers.protocol import CustomMetricInfo
from metrics_adapter.providers.scraped_pods import ANSWERS_MAX_BYTES, answer_bytes
from metrics_adapter.scraping.pod_registry import PodRegistry
from tests.unit.metrics_adapter.helpers import (
    FakeTokenReviewer,
    Harness,
    ManualClock,
    agent_samples,
    build,
    creds,
    trainer,
)

pytestmark = pytest.mark.unit

PODS = CustomMetricInfo("pods", True, "samples_per_second")
EVERY_TRAINER = LabelSelector.parse("app=trainer")


def test_the_lru_stays_within_its_budget_and_keeps_what_is_used() -> None:
    cache: ByteBoundedLRU[int, str] = ByteBoundedLRU(10_000)
    cache.put(-1, "hot", 500)
    for i in range(5_000):
        cache.put(i, "x", 100 + i % 900)
        assert cache.get(-1) == "hot"  # read between every put: the most recently used
        assert cache.bytes <= 10_000
    assert 0 < len(cache) < 5_000 and cache.get(0) is None  # the oldest went first
    cache.put(-2, "huge", 20_000)
    assert cache.get(-2) is None  # larger than the whole budget: not kept, nothing evicted
    assert cache.get(-1) == "hot"


def test_with_a_clock_entries_also_expire() -> None:
    clock = ManualClock()
    cache: ByteBoundedLRU[int, str] = ByteBoundedLRU(10_000, clock)
    cache.put(1, "short", 100, expires_at=clock.t + 5)
    cache.put(2, "long", 100, expires_at=clock.t + 10)
    cache.put(3, "gone", 100, expires_at=clock.t)  # already expired: not kept
    assert (cache.get(1), cache.get(2), cache.get(3)) == ("short", "long", None)
    clock.t += 5
    assert (cache.get(1), cache.get(2)) == (None, "long")
    clock.t += 5
    cache.expire()
    assert len(cache) == 0 and cache.bytes == 0 and cache.keys() == []
    with pytest.raises(ValueError, match="clock"):
        ByteBoundedLRU[int, str](10_000).put(1, "x", 1, expires_at=clock.t + 1)


def many_pods(n: int) -> Harness:
    pods = [trainer(f"trainer-{i}") for i in range(n)]
    h = build(pods)
    for pod in pods:
        h.feed(pod, agent_samples(1000, 40))
    h.clock.t += 10
    for i, pod in enumerate(pods):
        h.feed(pod, agent_samples(2000 + i, 80))
    return h


@pytest.mark.slow
def test_distinct_metric_selectors_cannot_grow_the_answers_past_their_budget() -> None:
    h = many_pods(400)
    for i in range(300):  # 300 answers of 400 pods: ~250 MB if each were kept
        metric_selector = LabelSelector.parse(f"attempt!=a{i}")
        items = h.provider.get_metric_by_selector("ml", EVERY_TRAINER, PODS, metric_selector)
        assert len(items) == 400
        assert h.provider.cache_bytes <= ANSWERS_MAX_BYTES + (4 << 20)
    # the usual traffic, one selector asked again, is still answered from the cache
    again = h.provider.get_metric_by_selector("ml", EVERY_TRAINER, PODS, LabelSelector())
    assert h.provider.get_metric_by_selector("ml", EVERY_TRAINER, PODS, LabelSelector()) is again


def test_an_answer_holds_no_more_than_its_estimate() -> None:
    """The estimate covers the answer's items, their JSON in both versions and the list."""
    h = many_pods(300)
    renderer = MetricListRenderer(max_bodies=1, max_bytes=0)  # keeps no body
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        selector = LabelSelector.parse("attempt!=measured")
        items = h.provider.get_metric_by_selector("ml", EVERY_TRAINER, PODS, selector)
        for version in ("v1beta1", "v1beta2"):
            renderer.render(version, items)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    key = ("ml", "pods", None, "samples_per_second", "app=trainer", "attempt!=measured")
    assert len(items) == 300
    assert 0 < held <= answer_bytes(key, len(items))


@pytest.mark.slow
def test_distinct_label_selectors_cannot_grow_the_registry_caches() -> None:
    registry = PodRegistry(selections_max_bytes=64 << 10)
    registry.replace_all(trainer(f"trainer-{i}", rank=str(i % 7)) for i in range(200))
    for i in range(2_000):
        selected = registry.select("ml", LabelSelector.parse(f"rank!={i % 7},x!=y{i}"))
        assert len(selected) in (171, 172)
        registry.owned("ml", f"r{i}.example.com")
        assert registry.cache_bytes <= 2 * (64 << 10)


def test_the_parse_caches_stay_within_their_budgets() -> None:
    for i in range(3_000):
        values = ",".join(f"{'v' * 50}-{j}-{i}" for j in range(4))
        LabelSelector.parse(f"team in ({values}),tier!=t{i}")
        try:
            parse_path(f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{'n' * 60}{i}/pods/*/m")
        except Exception:
            pass
    assert 0 < _parse_cached.cache.currsize <= PARSED_SELECTORS_MAX_BYTES  # type: ignore[attr-defined]
    assert 0 < parse_path.cache.currsize <= PARSED_PATHS_MAX_BYTES  # type: ignore[attr-defined]


class AllowAll:
    """A SubjectAccessReview seam that allows everything."""

    def review(self, attributes: RequestAttributes) -> tuple[bool, str]:
        return True, ""


def test_distinct_long_paths_cannot_grow_the_access_review_cache_past_its_budget() -> None:
    """A review's key holds the client's path (up to the 16 KiB request line): 1,000 distinct
    ones of 16 KiB held ~64 MB under the old count bound of 10,000; the bytes they really
    hold (tracemalloc) stay within the budget, and so does the estimate."""
    clock = ManualClock()
    authz = SubjectAccessReviewAuthorizer(AllowAll(), clock)
    user = UserInfo("system:serviceaccount:kube-system:horizontal-pod-autoscaler", ("hpa",))
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(1_000):
            authz.authorize(request_attributes(user, "GET", f"/x{i}/" + "a" * (16 << 10)))
            assert authz.cached_bytes <= ACCESS_REVIEWS_MAX_BYTES
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert 0 < held <= ACCESS_REVIEWS_MAX_BYTES
    assert authz.reviews == 1_000 and 0 < authz.cached < 1_000  # the oldest went first
    # the HPA's own query, asked again within the TTL, is still answered from the cache
    hpa = request_attributes(
        user, "GET", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/m"
    )
    authz.authorize(hpa)
    authz.authorize(hpa)
    assert authz.reviews == 1_001
    clock.t += 11  # and nothing outlives its TTL
    authz.authorize(hpa)
    assert authz.reviews == 1_002 and authz.cached == 1


def test_distinct_tokens_cannot_grow_the_token_review_cache_past_its_budget() -> None:
    clock = ManualClock()
    reviewer = FakeTokenReviewer()
    auth = TokenReviewAuthenticator(reviewer, ttl=10, clock=clock)
    for i in range(10_000):
        with pytest.raises(UnauthorizedError):
            auth.authenticate(creds(authorization=f"Bearer t{i}-" + "x" * 4000))
        assert auth.cached_bytes <= TOKEN_REVIEWS_MAX_BYTES
    assert 0 < auth.cached < 10_000  # bounded in bytes before the old count bound
    auth.authenticate(creds(authorization="Bearer good"))
    auth.authenticate(creds(authorization="Bearer good"))
    assert reviewer.calls == 10_001  # the usual token is still answered from the cache
