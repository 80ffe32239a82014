"""MetricWindow and MetricStore: rates like Prometheus rate() with resets, expiry, bounds."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.scraping.catalogue import MetricCatalogue
from metrics_adapter.scraping.evaluator import MetricEvaluator
from metrics_adapter.scraping.pod_registry import PodKey
from metrics_adapter.scraping.store import MetricStore, Sample
from metrics_adapter.scraping.window import MetricWindow, Point
from tests.unit.metrics_adapter.helpers import T0, ManualClock

POD = PodKey("ml", "trainer-0")


def window_of(points: list[tuple[float, float]], capacity: int = 64) -> MetricWindow:
    w = MetricWindow(capacity)
    for t, v in points:
        w.add(t, v)
    return w


def rate_of(w: MetricWindow, window_seconds: float) -> float:
    point = w.rate(window_seconds)
    assert point is not None, "no rate"
    return point.value


def test_rate_of_a_steady_counter() -> None:
    w = window_of([(t, 10.0 * t) for t in range(0, 31)])
    point = w.rate(30)
    assert point is not None
    assert point.value == pytest.approx(10.0) and point.timestamp == 30


def test_rate_handles_counter_reset() -> None:
    # 0..100 over 10 s, restart to 0, then 0..50 over 5 s: increase 100 + 50 (+0 at reset)
    pts = [(float(t), 10.0 * t) for t in range(0, 11)] + [(11.0, 0.0)]
    pts += [(11.0 + t, 10.0 * t) for t in range(1, 6)]
    assert rate_of(window_of(pts), 60) == pytest.approx(150.0 / 16.0)


def test_reset_to_a_non_zero_value_counts_the_new_value() -> None:
    assert rate_of(window_of([(0, 100.0), (10, 5.0)]), 60) == pytest.approx(0.5)


def test_rate_uses_only_the_window() -> None:
    pts = [(float(t), 1000.0 * t) for t in range(0, 10)]  # fast phase
    pts += [(float(t), 9000.0 + (t - 9)) for t in range(10, 40)]  # slow phase: 1/s
    assert rate_of(window_of(pts), 20) == pytest.approx(1.0)


def test_rate_needs_two_samples() -> None:
    assert window_of([]).rate(30) is None
    assert window_of([(0, 1.0)]).rate(30) is None
    assert window_of([(0, 1.0), (100, 5.0)]).rate(30) is None  # only one inside the window


def test_out_of_order_and_duplicate_samples_are_dropped() -> None:
    w = window_of([(10, 1.0)])
    assert not w.add(10, 2.0)
    assert not w.add(5, 2.0)
    assert w.latest() == Point(value=1.0, timestamp=10)


def test_capacity_bounds_the_ring() -> None:
    w = window_of([(float(t), float(t)) for t in range(1000)], capacity=8)
    assert w.size == 8
    assert [t for t, _ in w.samples()] == [float(t) for t in range(992, 1000)]
    point = w.rate(1e9)
    assert point is not None
    assert point.value == pytest.approx(1.0) and point.timestamp == 999.0


@settings(max_examples=200)
@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=2, max_size=40), st.integers(2, 16))
def test_rate_matches_a_reference_implementation(increments: list[float], capacity: int) -> None:
    values, total = [], 0.0
    for inc in increments:
        total += inc
        values.append(total)
    w = window_of([(float(i), v) for i, v in enumerate(values)], capacity)
    kept = values[-capacity:]
    expected = (kept[-1] - kept[0]) / (len(kept) - 1)
    assert rate_of(w, 1e9) == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_store_expires_silent_pods_and_drops_garbage_values() -> None:
    clock = ManualClock()
    store = MetricStore(capacity=4, expire_after=60, clock=clock)
    stored = store.ingest(
        POD, [Sample("a", {}, 1.0), Sample("b", {}, float("nan")), Sample("c", {}, float("inf"))]
    )
    assert stored == 1
    other = PodKey("ml", "trainer-1")
    clock.t += 50
    store.ingest(other, [Sample("a", {}, 1.0)])
    clock.t += 20
    assert store.expire() == [POD]
    assert store.pods() == [other]


def test_store_keeps_label_sets_apart() -> None:
    clock = ManualClock()
    store = MetricStore(capacity=4, expire_after=60, clock=clock)
    store.ingest(POD, [Sample("g", {"gpu": "0"}, 0.5), Sample("g", {"gpu": "1"}, 0.7)])
    assert len(store.windows(POD, "g")) == 2


def test_evaluator_staleness_and_memo() -> None:
    clock = ManualClock()
    store = MetricStore(capacity=8, expire_after=600, clock=clock)
    evaluator = MetricEvaluator(store, stale_after=15, clock=clock)
    sps = MetricCatalogue.default().custom["samples_per_second"]
    store.ingest(POD, [Sample("edl_trainer_samples_total", {}, 0.0)])
    assert evaluator.pod_value(sps, POD, LabelSelector()) is None  # one sample: no rate yet
    clock.t += 5
    store.ingest(POD, [Sample("edl_trainer_samples_total", {}, 50.0)])
    point = evaluator.pod_value(sps, POD, LabelSelector())
    assert point is not None
    assert point.value == pytest.approx(10.0)
    assert point.timestamp == T0 + 5
    clock.t += 16
    assert evaluator.pod_value(sps, POD, LabelSelector()) is None  # stale


def test_ratio_with_zero_denominator_is_no_value() -> None:
    clock = ManualClock()
    store = MetricStore(capacity=8, expire_after=600, clock=clock)
    evaluator = MetricEvaluator(store, stale_after=15, clock=clock)
    step = MetricCatalogue.default().custom["step_seconds"]
    for _ in range(2):
        store.ingest(
            POD,
            [
                Sample("edl_trainer_step_duration_seconds_sum", {}, 4.0),
                Sample("edl_trainer_step_duration_seconds_count", {}, 8.0),
            ],
        )
        clock.t += 5
    assert evaluator.pod_value(step, POD, LabelSelector()) is None  # idle trainer


def test_memory_is_bounded_and_measured() -> None:
    clock = ManualClock()
    store = MetricStore(capacity=16, expire_after=600, clock=clock)
    for rnd in range(40):
        for i in range(100):
            store.ingest(
                PodKey("ml", f"p{i}"),
                [
                    Sample("edl_trainer_samples_total", {}, rnd * 1.0),
                    Sample("edl_gpu_utilization_ratio", {"gpu": "0"}, 0.5),
                ],
            )
        clock.t += 1
    stats = store.stats()
    assert stats.pods == 100
    assert stats.series == 200
    assert stats.samples == 200 * 16  # capacity, not 40 rounds
    assert 0 < stats.bytes < 200 * 2000
    assert sys.getsizeof(store) > 0
