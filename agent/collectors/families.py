"""Metric families built the same way by every collector (one copy of the exposition rules)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

_go_float: Callable[[float], str] = floatToGoString
"""client_python's float formatting (`+Inf`, `0.5`), unannotated there."""


def histogram(
    name: str,
    documentation: str,
    bounds: Sequence[float],
    counts: Sequence[int],
    sum_value: float,
) -> HistogramMetricFamily:
    """A histogram from per-bucket (not cumulative) `counts` over `bounds` and an implied `+Inf`.

    The `le` labels are written as client_python writes them (`floatToGoString`), so our
    families and the library's own histograms agree on bucket names.
    """
    edges = (*bounds, float("inf"))
    if len(counts) != len(edges):
        raise ValueError(f"{name}: {len(counts)} bucket counts for {len(edges)} buckets")
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, n in zip(edges, counts, strict=True):
        cumulative += n
        buckets.append((_go_float(bound), cumulative))
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=sum_value)
