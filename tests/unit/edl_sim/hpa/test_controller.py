"""HorizontalController decisions, with numbers derived from horizontal.go by hand."""

from __future__ import annotations

from typing import Any

import pytest

from edl_sim.hpa.controller import (
    ABLE_TO_SCALE,
    SCALING_ACTIVE,
    ControllerSettings,
    Decision,
    HorizontalController,
    MetricValues,
    default_pods,
)
from edl_sim.hpa.replicas import PodState
from tests.unit.edl_sim.hpa.helpers import hpa_spec, pods_metric

METRIC = "samples_per_second"


def uniform(replicas: int, milli: int) -> MetricValues:
    """Every pod-i reports the same value."""
    return MetricValues(pods={METRIC: {p.name: milli for p in default_pods(replicas)}})


def wanting(replicas: int, desired: int) -> MetricValues:
    """Values that make a 1000m AverageValue target propose `desired` replicas.

    avg = floor(desired*1000/replicas), so ceil(avg/1000*replicas) == desired for the sizes used.
    """
    return uniform(replicas, desired * 1000 // replicas)


def run(
    model: HorizontalController, start: int, syncs: int, desired_metric: int, period: int = 15
) -> tuple[list[Decision], int]:
    current = start
    decisions = []
    for k in range(1, syncs + 1):
        d = model.step(k * period, current, wanting(current, desired_metric))
        decisions.append(d)
        current = d.desired_replicas
    return decisions, current


def behavior_model(behavior: dict[str, Any], **kw: Any) -> HorizontalController:
    return HorizontalController(hpa_spec(behavior=behavior, **kw))


# -- timing -------------------------------------------------------------------------------


def test_first_reconcile_is_one_sync_period_after_creation() -> None:
    model = HorizontalController(hpa_spec(), ControllerSettings(sync_period=15), created_at=100)
    assert list(model.sync_times(160)) == [115, 130, 145, 160]


def test_initial_recommendation_holds_scale_down_for_the_window() -> None:
    model = HorizontalController(hpa_spec())  # legacy path, 300 s window
    assert model.step(15, 10, wanting(10, 5)).desired_replicas == 10
    assert model.step(300, 10, wanting(10, 5)).desired_replicas == 10
    # at 315 the first recommendations (10 initial, 5 at t=15) are exactly 300 s old: out
    decision = model.step(315, 10, wanting(10, 5))
    assert decision.desired_replicas == 5
    assert decision.reason == "All metrics below target"


def test_kcm_restart_forgets_history() -> None:
    model = HorizontalController(hpa_spec(), ControllerSettings(downscale_stabilization=0))
    assert model.step(15, 10, wanting(10, 5)).desired_replicas == 5
    model.reset()
    assert model.recommendations == []


# -- legacy path --------------------------------------------------------------------------


@pytest.mark.parametrize(("current", "expected"), [(1, 4), (2, 4), (3, 6), (5, 10)])
def test_legacy_scale_up_limit_is_max_of_double_and_four(current: int, expected: int) -> None:
    model = HorizontalController(hpa_spec())
    decision = model.step(15, current, wanting(current, 50))
    assert decision.desired_replicas == expected
    assert decision.limiting_reason == "ScaleUpLimit"
    assert decision.reason == f"pods metric {METRIC} above target"


def test_legacy_has_no_period_memory() -> None:
    model = HorizontalController(hpa_spec())
    _, current = run(model, 1, 3, 50)
    assert current == 16  # 1 -> 4 -> 8 -> 16, one doubling per sync


def test_legacy_too_many_replicas() -> None:
    model = HorizontalController(hpa_spec(max_replicas=3))
    decision = model.step(15, 2, wanting(2, 10))
    assert decision.desired_replicas == 3
    assert decision.limiting_reason == "TooManyReplicas"


def test_legacy_too_few_replicas() -> None:
    model = HorizontalController(
        hpa_spec(min_replicas=3), ControllerSettings(downscale_stabilization=0)
    )
    decision = model.step(15, 4, wanting(4, 1))
    assert decision.desired_replicas == 3
    assert decision.limiting_reason == "TooFewReplicas"
    assert decision.stabilized_replicas == 1


# -- min / max branches ---------------------------------------------------------------------


def test_above_max_goes_to_max_without_metrics() -> None:
    model = HorizontalController(hpa_spec(max_replicas=10))
    decision = model.step(15, 12, MetricValues())
    assert (decision.desired_replicas, decision.rescaled) == (10, True)
    assert decision.reason == "Current number of replicas above Spec.MaxReplicas"
    assert decision.metric_replicas is None


def test_below_min_goes_to_min_and_records_no_recommendation() -> None:
    model = HorizontalController(hpa_spec(min_replicas=2))
    decision = model.step(15, 1, MetricValues())
    assert decision.desired_replicas == 2
    assert decision.reason == "Current number of replicas below Spec.MinReplicas"
    assert len(model.recommendations) == 1  # only the initial one


def test_zero_replicas_disables_scaling() -> None:
    decision = HorizontalController(hpa_spec()).step(15, 0, MetricValues())
    assert (decision.desired_replicas, decision.rescaled) == (0, False)
    condition = decision.condition(SCALING_ACTIVE)
    assert condition is not None and condition.reason == "ScalingDisabled"


# -- multiple metrics and the freeze rule ---------------------------------------------------


def two_metric_spec() -> Any:
    external = {
        "type": "External",
        "external": {
            "metric": {"name": "queue"},
            "target": {"type": "AverageValue", "averageValue": "10"},
        },
    }
    return hpa_spec([pods_metric(), external])


def test_max_over_metrics_wins() -> None:
    model = HorizontalController(two_metric_spec())
    values = MetricValues(
        pods={METRIC: {p.name: 1500 for p in default_pods(4)}},  # -> 6
        external={"queue": [70_000]},  # 70/(10*4) = 1.75 -> 7
    )
    decision = model.step(15, 4, values)
    assert decision.metric_replicas == 7
    assert decision.metric == "external metric queue(<nil>)"
    assert decision.desired_replicas == 7


def test_invalid_metric_freezes_a_scale_down() -> None:
    model = HorizontalController(two_metric_spec(), ControllerSettings(downscale_stabilization=0))
    values = MetricValues(
        pods={METRIC: {p.name: 500 for p in default_pods(4)}}
    )  # -> 2, queue missing
    decision = model.step(15, 4, values)
    assert (decision.desired_replicas, decision.rescaled) == (4, False)
    assert decision.metric_replicas is None
    active = decision.condition(SCALING_ACTIVE)
    assert active is not None and (active.status, active.reason) == (
        False,
        "FailedGetExternalMetric",
    )
    assert decision.error is not None and "1 invalid out of 2" in decision.error
    assert len(model.recommendations) == 1  # frozen syncs record nothing


def test_invalid_metric_does_not_block_a_scale_up() -> None:
    model = HorizontalController(two_metric_spec())
    values = MetricValues(pods={METRIC: {p.name: 1500 for p in default_pods(4)}})  # -> 6
    decision = model.step(15, 4, values)
    assert decision.desired_replicas == 6
    active = decision.condition(SCALING_ACTIVE)
    assert active is not None and active.reason == "ValidMetricFound"
    assert decision.error is not None


def test_all_metrics_invalid_freezes() -> None:
    decision = HorizontalController(two_metric_spec()).step(15, 4, MetricValues())
    assert (decision.desired_replicas, decision.rescaled) == (4, False)
    active = decision.condition(SCALING_ACTIVE)
    assert active is not None and active.reason == "FailedGetPodsMetric"


# -- behavior: defaults, policies, periods, selectPolicy ------------------------------------


def test_default_behavior_differs_from_legacy() -> None:
    # behavior: {} gets the defaults: +max(4 pods, 100 %) per 15 s
    model = behavior_model({})
    assert model.step(15, 1, wanting(1, 50)).desired_replicas == 5  # legacy would say 4
    assert model.step(30, 5, wanting(5, 50)).desired_replicas == 10


def test_pods_policy_with_period_memory() -> None:
    model = behavior_model(
        {"scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}}
    )
    decisions, _ = run(model, 2, 5, 10)
    # +2 at 15 s; that event stays inside the 60 s period until 75 s (strict cutoff)
    assert [d.desired_replicas for d in decisions] == [4, 4, 4, 4, 6]
    assert decisions[1].limiting_reason == "ScaleUpLimit"


def test_scale_event_is_stamped_when_the_rescale_took_effect() -> None:
    # Period 15 s = the sync period. An event stamped at the sync (15.000) is out of the period
    # at 30.000 (strict cutoff), so the second sync may add 2 more; stamped when the scale
    # update returned (15.020), as the real controller does, it still limits the second sync.
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 15}]}}
    at_sync = behavior_model(behavior)
    assert at_sync.step(15, 2, wanting(2, 10)).desired_replicas == 4
    assert at_sync.step(30, 4, wanting(4, 10)).desired_replicas == 6
    after_update = behavior_model(behavior)
    first = after_update.step(15, 2, wanting(2, 10), scaled_at=15.02)
    assert first.desired_replicas == 4
    assert after_update.last_scale_time == 15.02
    second = after_update.step(30, 4, wanting(4, 10))
    assert second.desired_replicas == 4
    assert second.limiting_reason == "ScaleUpLimit"


def test_percent_scale_up_rounds_up() -> None:
    model = behavior_model(
        {"scaleUp": {"policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}]}}
    )
    assert model.step(15, 5, wanting(5, 20)).desired_replicas == 8  # ceil(7.5)


def test_percent_scale_down_truncates() -> None:
    model = behavior_model(
        {
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}],
            }
        }
    )
    decision = model.step(15, 5, wanting(5, 1))
    assert decision.desired_replicas == 2  # int(5 * 0.5) = int(2.5) = 2
    assert decision.limiting_reason == "ScaleDownLimit"


def test_percent_scale_down_period_start_counts_earlier_events() -> None:
    model = behavior_model(
        {
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}],
            }
        }
    )
    decisions, _ = run(model, 8, 6, 1)
    # 8 -> 4 at 15 s; period start stays 8 until the event leaves the 60 s period at 75 s
    assert [d.desired_replicas for d in decisions] == [4, 4, 4, 4, 2, 2]


@pytest.mark.parametrize(("select", "expected"), [("Max", 20), ("Min", 14), ("Disabled", 10)])
def test_select_policy_scale_up(select: str, expected: int) -> None:
    model = behavior_model({"scaleUp": {"selectPolicy": select}})  # default policies 4 pods / 100 %
    decision = model.step(15, 10, wanting(10, 50))
    assert decision.desired_replicas == expected
    assert decision.limiting_reason == "ScaleUpLimit"


@pytest.mark.parametrize(("select", "expected"), [("Max", 5), ("Min", 9), ("Disabled", 10)])
def test_select_policy_scale_down(select: str, expected: int) -> None:
    model = behavior_model(
        {
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "selectPolicy": select,
                "policies": [
                    {"type": "Pods", "value": 1, "periodSeconds": 15},
                    {"type": "Percent", "value": 50, "periodSeconds": 15},
                ],
            }
        }
    )
    decision = model.step(15, 10, wanting(10, 1))
    assert decision.desired_replicas == expected
    assert decision.rescaled is (expected != 10)


def test_behavior_min_clamp_is_too_few_replicas() -> None:
    model = behavior_model({"scaleDown": {"stabilizationWindowSeconds": 0}}, min_replicas=3)
    decision = model.step(15, 5, wanting(5, 1))
    assert decision.desired_replicas == 3
    assert decision.limiting_reason == "TooFewReplicas"


# -- stabilisation windows ------------------------------------------------------------------


def test_scale_down_window_uses_the_highest_recent_recommendation() -> None:
    model = behavior_model({"scaleDown": {"stabilizationWindowSeconds": 60}})
    current = 5
    desired = []
    for t, want in [(15, 5), (30, 2), (45, 2), (60, 2), (75, 2)]:
        d = model.step(t, current, wanting(current, want))
        desired.append(d.desired_replicas)
        current = d.desired_replicas
    assert desired == [5, 5, 5, 5, 2]
    able = model.step(90, 2, wanting(2, 2)).condition(ABLE_TO_SCALE)
    assert able is not None


def test_scale_down_stabilized_condition() -> None:
    model = behavior_model({"scaleDown": {"stabilizationWindowSeconds": 60}})
    model.step(15, 5, wanting(5, 5))
    decision = model.step(30, 5, wanting(5, 2))
    able = decision.condition(ABLE_TO_SCALE)
    assert able is not None and able.reason == "ScaleDownStabilized"


def test_scale_up_window_uses_the_lowest_recent_recommendation() -> None:
    model = behavior_model({"scaleUp": {"stabilizationWindowSeconds": 30}})
    decisions, _ = run(model, 2, 3, 6)
    assert [d.desired_replicas for d in decisions] == [2, 2, 6]
    able = decisions[0].condition(ABLE_TO_SCALE)
    assert able is not None and able.reason == "ScaleUpStabilized"


def test_default_scale_down_window_comes_from_the_flag() -> None:
    model = behavior_model({}, min_replicas=1)
    settings_model = HorizontalController(
        hpa_spec(behavior={}), ControllerSettings(downscale_stabilization=30)
    )
    assert model.step(15, 4, wanting(4, 1)).desired_replicas == 4
    assert model.step(60, 4, wanting(4, 1)).desired_replicas == 4
    settings_model.step(15, 4, wanting(4, 1))
    assert settings_model.step(40, 4, wanting(4, 1)).desired_replicas == 4
    assert settings_model.step(45, 4, wanting(4, 1)).desired_replicas == 1


# -- tolerance from the behavior (HPAConfigurableTolerance) ---------------------------------


def test_per_hpa_tolerance_needs_the_feature_gate() -> None:
    behavior = {"scaleUp": {"tolerance": "0.05"}, "scaleDown": {"tolerance": "0.5"}}
    values = uniform(10, 1070)  # ratio 1.07
    gate_off = HorizontalController(  # v1.33-1.34
        hpa_spec(behavior=behavior), ControllerSettings(configurable_tolerance=False)
    )
    gate_on = HorizontalController(hpa_spec(behavior=behavior))  # v1.35: on by default
    assert gate_off.step(15, 10, values).desired_replicas == 10
    assert gate_on.step(15, 10, values).desired_replicas == 11  # ceil(10.7)


# -- Object / External through the controller ----------------------------------------------


def object_spec(target_type: str) -> Any:
    key = "value" if target_type == "Value" else "averageValue"
    return hpa_spec(
        [
            {
                "type": "Object",
                "object": {
                    "describedObject": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "trainer",
                    },
                    "metric": {"name": "pending_samples"},
                    "target": {"type": target_type, key: "10"},
                },
            }
        ]
    )


def test_object_value_versus_average_value() -> None:
    values = MetricValues(objects={"pending_samples": 30_000})
    value_model = HorizontalController(object_spec("Value"))
    average_model = HorizontalController(object_spec("AverageValue"))
    value = value_model.step(15, 2, values)
    average = average_model.step(15, 2, values)
    assert (value.metric_replicas, value.metric) == (6, "Deployment metric pending_samples")
    assert average.metric_replicas == 3
    assert average.metric == "external metric pending_samples(<nil>)"  # the controller's quirk


def test_average_value_divides_by_status_replicas() -> None:
    model = HorizontalController(object_spec("AverageValue"))
    # spec.replicas 4 but only 2 pods exist yet: 30/(10*2) = 1.5 -> ceil(3) = 3 < 4,
    decision = model.step(
        15, 4, MetricValues(objects={"pending_samples": 30_000}), status_replicas=2
    )
    assert decision.metric_replicas == 3


def external_spec(target_type: str) -> Any:
    key = "value" if target_type == "Value" else "averageValue"
    return hpa_spec(
        [
            {
                "type": "External",
                "external": {
                    "metric": {"name": "queue_depth", "selector": {"matchLabels": {"job": "r"}}},
                    "target": {"type": target_type, key: "10"},
                },
            }
        ]
    )


def test_external_value_versus_average_value() -> None:
    # items 20 + 25 = 45 against 10; 3 replicas of which 2 pods are Ready
    values = MetricValues(external={"queue_depth": [20_000, 25_000]})
    pods = [PodState("a"), PodState("b"), PodState("c", ready=False)]
    value = HorizontalController(external_spec("Value")).step(15, 3, values, pods)
    average = HorizontalController(external_spec("AverageValue")).step(15, 3, values, pods)
    assert value.metric_replicas == 9  # ceil(4.5 * 2 ready pods)
    assert average.metric_replicas == 5  # 45/(10*3) = 1.5 -> ceil(45/10)
    assert average.metric_statuses[0].current == 15_000  # ceil(45/3) per pod
    assert value.metric.startswith("external metric queue_depth(&LabelSelector{MatchLabels:")
