"""Simulation of pods coming and going, load models, summary figures and the tuner."""

from __future__ import annotations

from decimal import Decimal

import pytest

from edl_sim.hpa.controller import ControllerSettings
from edl_sim.hpa.simulate import LoadModel, Simulation, SimulationSettings
from edl_sim.hpa.trace import MetricTrace, TracePoint
from edl_sim.hpa.tune import BehaviorParams, Objective, Tuner, params_from_behavior
from tests.unit.edl_sim.hpa.helpers import hpa_spec, pods_metric

METRIC = "samples_per_second"


def per_pod(points: list[tuple[float, dict[str, str]]]) -> MetricTrace:
    return MetricTrace(
        TracePoint(t, METRIC, Decimal(v), pod=pod)
        for t, values in points
        for pod, v in values.items()
    )


def test_split_model_scales_to_the_load_and_summarises() -> None:
    trace = per_pod([(0, {"a": "2", "b": "2"}), (60, {"a": "0.5", "b": "0.5"})])
    spec = hpa_spec([pods_metric(METRIC, "1")], max_replicas=10)
    result = Simulation(
        spec, trace, SimulationSettings(initial_replicas=2, rescale_cost=10, duration=90)
    ).run()
    rows = [(s.decision.time, s.decision.desired_replicas, s.target_replicas) for s in result.steps]
    # t=15: 2 pods at 2.0 -> ratio 2 -> 4; t=30: total 4 over 4 pods -> 1.0 each -> stay;
    # t=60: total 1 -> the 5 min stabilisation window holds 4.
    assert rows == [(15, 4, 4), (30, 4, 4), (45, 4, 4), (60, 4, 1), (75, 4, 1), (90, 4, 1)]
    assert result.steps[1].metric_values == (1.0,)
    summary = result.summary
    assert (summary.rescales, summary.scale_ups, summary.scale_downs) == (1, 1, 0)
    assert summary.under_replica_seconds == 0
    assert summary.over_replica_seconds == 3 * 3 * 15
    assert (summary.paused_seconds, summary.paused_replica_seconds) == (10, 40)
    assert summary.longest_over == 45
    assert summary.reaches[0].after == 0  # reached at the very sync the target appeared


def test_pending_pods_are_unready_while_starting() -> None:
    trace = per_pod([(0, {"a": "2", "b": "2"})])
    spec = hpa_spec([pods_metric(METRIC, "1")], max_replicas=10)
    result = Simulation(
        spec, trace, SimulationSettings(initial_replicas=2, pod_startup=30, duration=45)
    ).run()
    second = result.steps[1]
    # at 30 s the two new pods are Pending: the 2 running pods report 2.0 each, the unready
    # pods count as 0 -> (2+2+0+0)/4 = 1.0 -> within tolerance -> no further scale-up
    assert second.ready_pods == 2
    assert second.decision.desired_replicas == 4
    assert result.steps[2].ready_pods == 4


def test_replay_model_uses_recorded_pods_then_their_mean() -> None:
    trace = per_pod([(0, {"a": "1", "b": "3"})])
    spec = hpa_spec([pods_metric(METRIC, "1")], max_replicas=10)
    settings = SimulationSettings(initial_replicas=3, load_model=LoadModel.REPLAY, duration=15)
    result = Simulation(spec, trace, settings).run()
    # pods: 1, 3 and the mean 2 -> avg 2 -> ceil(2 * 3) = 6 (legacy limit max(6, 4))
    assert result.steps[0].decision.desired_replicas == 6


def test_object_trace_drives_an_external_metric() -> None:
    trace = MetricTrace([TracePoint(0, "queue", Decimal(45), object="q")])
    external = {
        "type": "External",
        "external": {
            "metric": {"name": "queue"},
            "target": {"type": "AverageValue", "averageValue": "10"},
        },
    }
    result = Simulation(
        hpa_spec([external]), trace, SimulationSettings(initial_replicas=3, duration=15)
    ).run()
    assert result.steps[0].decision.desired_replicas == 5
    assert result.steps[0].target_replicas == 5


def _oscillating_trace() -> MetricTrace:
    points = []
    for k in range(0, 80):
        t = k * 15.0
        total = "6" if (k // 4) % 2 == 0 else "3"
        points.append((t, {"a": total}))
    return per_pod(points)


@pytest.mark.slow
def test_tuner_is_deterministic_and_never_worse_than_where_it_starts() -> None:
    trace = _oscillating_trace()
    spec = hpa_spec([pods_metric(METRIC, "1")], max_replicas=10, behavior={})
    objective = Objective(under_weight=1, over_weight=0.2, pause_weight=1)
    settings = SimulationSettings(initial_replicas=3, rescale_cost=30)
    controller = ControllerSettings()

    def tune() -> tuple[BehaviorParams, tuple[float, ...], tuple[float, ...]]:
        result = Tuner(spec, trace, settings, controller, objective, max_rounds=2).run()
        return result.best, result.best_score, result.current_score

    first = tune()
    assert first == tune()
    best, best_score, current_score = first
    assert best_score <= current_score
    assert best.behavior().scale_up is not None


def test_params_from_behavior_round_trip() -> None:
    params = BehaviorParams(up_window=30, up_pods=2, down_window=600, down_pods=1, down_percent=10)
    assert params_from_behavior(params.behavior(), 300) == params


def test_resource_utilization_uses_the_request_default_of_one_unit() -> None:
    trace = MetricTrace(TracePoint(0, "cpu", Decimal("1.2"), pod=p) for p in ("a", "b"))
    cpu = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}},
    }
    settings = SimulationSettings(initial_replicas=2, duration=15)
    # total 2.4 cores over 2 pods with 1-core requests: 120 % against 60 % -> 4
    result = Simulation(hpa_spec([cpu]), trace, settings).run()
    assert result.steps[0].decision.desired_replicas == 4
    assert result.steps[0].metric_values == (120.0,)
    halved = SimulationSettings(initial_replicas=2, duration=15, requests={"cpu": Decimal("2")})
    # 2-core requests: 60 % -> within tolerance -> 2
    assert Simulation(hpa_spec([cpu]), trace, halved).run().steps[0].decision.desired_replicas == 2
