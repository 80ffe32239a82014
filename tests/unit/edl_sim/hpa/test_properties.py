"""Invariants of the controller model over random metric sequences (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edl_sim.hpa.controller import (
    ControllerSettings,
    HorizontalController,
    MetricValues,
    default_pods,
)
from tests.unit.edl_sim.hpa.helpers import hpa_spec

METRIC = "samples_per_second"

desires = st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=30)


def values_for(current: int, desired: int) -> MetricValues:
    return MetricValues(
        pods={METRIC: {p.name: desired * 1000 // current for p in default_pods(current)}}
    )


def drive(model: HorizontalController, start: int, wants: list[int]) -> list[tuple[int, int]]:
    current = start
    seen = []
    for k, want in enumerate(wants, start=1):
        decision = model.step(15.0 * k, current, values_for(current, max(want, 1)))
        seen.append((current, decision.desired_replicas))
        current = decision.desired_replicas
    return seen


@settings(max_examples=60)
@given(wants=desires, start=st.integers(min_value=2, max_value=20), legacy=st.booleans())
def test_count_stays_within_min_and_max(wants: list[int], start: int, legacy: bool) -> None:
    spec = hpa_spec(min_replicas=2, max_replicas=20, behavior=None if legacy else {})
    model = HorizontalController(spec, ControllerSettings(downscale_stabilization=30))
    for _, desired in drive(model, start, wants):
        assert 2 <= desired <= 20


@settings(max_examples=60)
@given(wants=desires, start=st.integers(min_value=2, max_value=20))
def test_disabled_scale_down_never_scales_down(wants: list[int], start: int) -> None:
    spec = hpa_spec(max_replicas=40, behavior={"scaleDown": {"selectPolicy": "Disabled"}})
    for current, desired in drive(HorizontalController(spec), start, wants):
        assert desired >= current


@settings(max_examples=60)
@given(wants=desires, start=st.integers(min_value=1, max_value=20))
def test_pods_policy_caps_growth_per_period(wants: list[int], start: int) -> None:
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 3, "periodSeconds": 60}]}}
    spec = hpa_spec(max_replicas=40, behavior=behavior)
    seen = drive(HorizontalController(spec), start, wants)
    counts = [start] + [d for _, d in seen]
    # a scale-up at sync i starts from the count at the start of the 60 s period, i.e. after
    # sync i-4 (the event of sync i-4 is exactly 60 s old, so out): at most 3 more than that
    for i in range(1, len(counts)):
        if counts[i] > counts[i - 1]:
            assert counts[i] <= counts[max(0, i - 4)] + 3
