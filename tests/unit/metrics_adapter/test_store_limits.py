"""The store's bounds against hostile pods and readers: series cap, pruning, bounded memo,
and the exposition pre-scan that refuses an oversized scrape before building its samples."""

from __future__ import annotations

import logging

import pytest

from metrics_adapter.errors import ScrapeError
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.scraping.catalogue import MetricCatalogue
from metrics_adapter.scraping.evaluator import MetricEvaluator
from metrics_adapter.scraping.pod_registry import PodKey
from metrics_adapter.scraping.sources.exposition import TooManySeries, parse_exposition
from metrics_adapter.scraping.store import MEMO_ENTRIES_PER_POD, MetricStore, Sample
from tests.unit.metrics_adapter.helpers import ManualClock

HOSTILE = PodKey("ml", "hostile")
GOOD = PodKey("ml", "trainer-0")
GPU = MetricCatalogue.default().custom["gpu_utilization"]


def gpus(first: int, count: int, value: float = 0.5) -> list[Sample]:
    return [
        Sample("edl_gpu_utilization_ratio", {"gpu": str(i)}, value)
        for i in range(first, first + count)
    ]


def test_new_label_sets_beyond_the_cap_are_refused_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, refused = ManualClock(), list[object]()
    store = MetricStore(8, 600, clock, max_series_per_pod=10, on_refused=refused.append)
    with caplog.at_level(logging.WARNING, logger="metrics_adapter.scraping.store"):
        assert store.ingest(HOSTILE, gpus(0, 15)) == 10
        clock.t += 1
        store.ingest(HOSTILE, gpus(100, 5))  # still over: refused, not logged again
        store.ingest(GOOD, gpus(0, 2))
    assert refused == [5, 5]
    assert len(store.windows(HOSTILE, "edl_gpu_utilization_ratio")) == 10
    assert len(store.windows(GOOD, "edl_gpu_utilization_ratio")) == 2  # others unaffected
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "ml/hostile exceeds the series cap (10 label sets" in warnings[0]
    # label sets it already has keep being stored
    assert store.ingest(HOSTILE, gpus(0, 10)) == 10


def test_a_pod_refused_whole_is_logged_every_300_s_not_at_each_expiry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its scrapes are refused before ingest, so it has no data to keep a log time with."""
    clock = ManualClock()
    store = MetricStore(8, expire_after=75, clock=clock, max_series_per_pod=10)
    with caplog.at_level(logging.WARNING, logger="metrics_adapter.scraping.store"):
        for _ in range(60):  # 10 minutes of scrapes every 10 s, each over the cap alone
            store.refuse(HOSTILE, 11)
            store.expire()
            clock.t += 10
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # at 0 s and at 300 s
    assert HOSTILE not in store.pods()  # a refused scrape stores nothing


def test_label_sets_not_seen_for_the_prune_window_are_dropped() -> None:
    clock = ManualClock()
    store = MetricStore(8, 600, clock, max_series_per_pod=10, prune_after=30)
    evaluator = MetricEvaluator(store, stale_after=15, clock=clock)
    store.ingest(HOSTILE, gpus(0, 10, value=0.0))  # ten GPUs idle ...
    for _ in range(10):  # ... then only GPU 0 remains, busy (pruned within 1.5 x 30 s)
        clock.t += 5
        store.ingest(HOSTILE, gpus(0, 1, value=1.0))
    assert len(store.windows(HOSTILE, "edl_gpu_utilization_ratio")) == 1
    point = evaluator.pod_value(GPU, HOSTILE, LabelSelector())
    assert point is not None and point.value == 1.0  # not a mean over vanished GPUs
    assert store.ingest(HOSTILE, gpus(50, 9)) == 9  # the freed room is usable again


def test_distinct_metric_selectors_cannot_grow_the_memo() -> None:
    clock = ManualClock()
    store = MetricStore(8, 600, clock)
    evaluator = MetricEvaluator(store, stale_after=15, clock=clock)
    pods = [PodKey("ml", f"p{i}") for i in range(50)]
    for pod in pods:
        store.ingest(pod, gpus(0, 2))
    for i in range(500):
        selector = LabelSelector.parse(f"gpu in ({i % 3},x{i})")
        evaluator.pod_values(GPU, pods, selector)
        evaluator.pod_value(GPU, pods[0], selector)
    sizes = [len(store._pods[p].memo) for p in pods]
    assert max(sizes) <= MEMO_ENTRIES_PER_POD
    # the HPA's own query is still answered from the memo after the flood
    plain = evaluator.pod_values(GPU, pods, LabelSelector())
    assert all(p is not None and p.value == 0.5 for p in plain)


def test_the_exposition_scan_refuses_an_oversized_scrape_before_parsing() -> None:
    needed = {"edl_gpu_utilization_ratio", "edl_trainer_samples_total"}.__contains__
    text = "# HELP x y\n# TYPE edl_gpu_utilization_ratio gauge\n" + "".join(
        f'edl_gpu_utilization_ratio{{gpu="{i}"}} 0.5\n' for i in range(20_000)
    )
    with pytest.raises(TooManySeries) as caught:
        parse_exposition(text, needed, max_samples=500)
    assert caught.value.reason == "too_many_series"
    small = "process_cpu_seconds_total 3\nedl_trainer_samples_total 7\n"
    assert [(s.name, s.value) for s in parse_exposition(small, needed, max_samples=1)] == [
        ("edl_trainer_samples_total", 7.0)
    ]
    with pytest.raises(ScrapeError, match="no metric name") as garbage:
        parse_exposition("<html>oops</html>\n", needed)
    assert garbage.value.reason == "parse"
    with pytest.raises(ScrapeError) as broken:
        parse_exposition("edl_trainer_samples_total{{{ x\n", needed)
    assert broken.value.reason == "parse"
