"""Every cache keyed by client input stays within its byte budget, whatever the client sends.

Distinct ``metricLabelSelector`` values once grew the adapter by 650 MB at 1,000 pods (issue
25): each kept a whole answer. The budgets hold only if the estimates err high, so one test
measures what an answer really holds (tracemalloc) beside its estimate.
"""

from __future__ import annotations

import tracemalloc

import pytest

from metrics_adapter.api.routes import PARSED_PATHS_MAX_BYTES, parse_path
from metrics_adapter.api.selectors import PARSED_SELECTORS_MAX_BYTES, LabelSelector, _parse_cached
from metrics_adapter.api.wire_shapes import MetricListRenderer
from metrics_adapter.bounded_cache import ByteBoundedLRU
from metrics_adapter.providers.protocol import CustomMetricInfo
from metrics_adapter.providers.scraped_pods import ANSWERS_MAX_BYTES, answer_bytes
from metrics_adapter.scraping.pod_registry import PodRegistry
from tests.unit.metrics_adapter.helpers import Harness, agent_samples, build, trainer

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


def many_pods(n: int) -> Harness:
    pods = [trainer(f"trainer-{i}") for i in range(n)]
    h = build(pods)
    for pod in pods:
        h.feed(pod, agent_samples(1000, 40))
    h.clock.t += 10
    for i, pod in enumerate(pods):
        h.feed(pod, agent_samples(2000 + i, 80))
    return h


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
