"""The scale bench's in-adapter latency: a quantile read from the adapter's own histogram.

bench/bench_scale.py prints it beside the latency through kube-apiserver, so a reader can
tell the adapter's share of a slow answer from kube-apiserver's; a wrong bucket would blame
the wrong process.
"""

from __future__ import annotations

import math

import pytest

from bench.bench_scale import bucket_quantile, request_buckets

pytestmark = pytest.mark.unit


def exposition(counts: dict[str, list[int]]) -> str:
    """Prometheus text for the histogram of each route: cumulative counts per bucket."""
    bounds = ("0.005", "0.01", "0.025", "+Inf")
    lines = ["# HELP edl_adapter_request_duration_seconds Time to answer an API request."]
    for route, cumulative in counts.items():
        for le, n in zip(bounds, cumulative, strict=True):
            lines.append(
                f'edl_adapter_request_duration_seconds_bucket{{code="200",le="{le}",'
                f'route="{route}"}} {n}.0'
            )
        lines.append(f'edl_adapter_request_duration_seconds_count{{route="{route}"}} {n}.0')
    lines.append("edl_adapter_pods 3.0")
    return "\n".join(lines)


def test_routes_are_summed_per_bucket() -> None:
    text = exposition({"external": [1, 2, 3, 3], "custom": [0, 4, 4, 5]})

    assert request_buckets(text) == {0.005: 1, 0.01: 6, 0.025: 7, math.inf: 8}


def test_the_quantile_is_the_bound_of_the_bucket_that_holds_it_within_the_window() -> None:
    before = request_buckets(exposition({"external": [50, 50, 50, 50]}))
    # In the window: 90 answers under 5 ms, 8 between 10 and 25 ms, 2 slower than 25 ms.
    after = request_buckets(exposition({"external": [140, 140, 148, 150]}))

    assert bucket_quantile(before, after, 0.5) == 0.005
    assert bucket_quantile(before, after, 0.95) == 0.025
    assert bucket_quantile(before, after, 0.99) == math.inf


def test_a_window_without_requests_has_no_quantile() -> None:
    same = request_buckets(exposition({"external": [5, 6, 7, 7]}))

    assert math.isnan(bucket_quantile(same, same, 0.99))
    assert math.isnan(bucket_quantile({}, {}, 0.5))
