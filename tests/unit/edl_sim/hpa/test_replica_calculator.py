"""ReplicaCalculator against numbers derived by hand from replica_calculator.go."""

from __future__ import annotations

import pytest

from edl_sim.hpa.errors import MetricUnavailable
from edl_sim.hpa.replicas import (
    PodMetric,
    PodPhase,
    PodState,
    ReplicaCalculator,
    Tolerances,
    int_div,
)

TOL = Tolerances(0.1, 0.1)


def running(*names: str) -> list[PodState]:
    return [PodState(n) for n in names]


def calc() -> ReplicaCalculator:
    return ReplicaCalculator()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1050, 10),  # ratio 1.05: inside the band, keep 10
        (1100, 10),  # ratio 1.1 exactly: the band is inclusive
        (1101, 12),  # ratio 1.101: ceil(11.01) = 12
        (900, 10),  # ratio 0.9 exactly: inclusive lower bound
        (890, 9),  # ratio 0.89: ceil(8.9) = 9
    ],
)
def test_tolerance_band_is_inclusive(value: int, expected: int) -> None:
    names = [f"p{i}" for i in range(10)]
    proposal = calc().pods_metric_replicas(
        10, 1000, dict.fromkeys(names, value), running(*names), TOL
    )
    assert proposal.replicas == expected


def test_average_uses_int64_truncating_division() -> None:
    # (1101 + 1100 + 1100) / 3 = 1100 in int64 -> ratio 1.1 -> within; a float mean would give 4.
    values = {"a": 1101, "b": 1100, "c": 1100}
    proposal = calc().pods_metric_replicas(3, 1000, values, running("a", "b", "c"), TOL)
    assert (proposal.replicas, proposal.usage) == (3, 1100)
    assert int_div(-7, 2) == -3


def test_asymmetric_tolerances() -> None:
    # up 5 %, down 50 % (k8s TestHPAWithTolerance numbers, External AverageValue 100 per pod)
    tol = Tolerances(scale_down=0.5, scale_up=0.05)
    assert calc().per_pod_replicas(35, 100_000, 3_700_000, tol).replicas == 37
    assert calc().per_pod_replicas(37, 100_000, 3_800_000, tol).replicas == 37
    assert calc().per_pod_replicas(37, 100_000, 1_000_000, tol).replicas == 10
    assert calc().per_pod_replicas(10, 100_000, 800_000, tol).replicas == 10


def test_missing_pods_on_scale_up_count_as_zero_and_can_cancel_it() -> None:
    # c, d have no metric. ratio 1.15 -> missing get 0 -> 2300/4 = 575 -> ratio 0.575 flips
    # the direction, so the current count stays (a naive ceil(1.15*2) would say 3).
    values = {"a": 1150, "b": 1150}
    proposal = calc().pods_metric_replicas(4, 1000, values, running("a", "b", "c", "d"), TOL)
    assert proposal.replicas == 4


def test_missing_pods_on_scale_up_rebalanced() -> None:
    # ratio 3 -> missing get 0 -> (3000+3000+0+0)/4 = 1500 -> ceil(1.5*4) = 6
    values = {"a": 3000, "b": 3000}
    assert (
        calc().pods_metric_replicas(4, 1000, values, running("a", "b", "c", "d"), TOL).replicas == 6
    )


def test_missing_pods_on_scale_down_count_as_target() -> None:
    # ratio 0.2 -> missing get the target 1000 -> 2400/4 = 600 -> ceil(0.6*4) = 3, not ceil(0.2*2)=1
    values = {"a": 200, "b": 200}
    proposal = calc().pods_metric_replicas(4, 1000, values, running("a", "b", "c", "d"), TOL)
    assert proposal.replicas == 3


def test_unready_pods_count_as_zero_on_scale_up() -> None:
    # c is Pending (its metric is dropped). ratio 1.6 would give ceil(3.2) = 4, but with c at 0:
    # 3200/3 = 1066 -> ratio 1.066 is within the band -> keep 3.
    pods = [PodState("a"), PodState("b"), PodState("c", phase=PodPhase.PENDING)]
    values = {"a": 1600, "b": 1600, "c": 9000}
    assert calc().pods_metric_replicas(3, 1000, values, pods, TOL).replicas == 3


def test_unready_pods_are_left_out_on_scale_down() -> None:
    pods = [PodState("a"), PodState("b"), PodState("c", phase=PodPhase.PENDING)]
    assert calc().pods_metric_replicas(3, 1000, {"a": 400, "b": 400}, pods, TOL).replicas == 1


def test_deleting_and_failed_pods_are_ignored() -> None:
    pods = [PodState("a"), PodState("b", deleting=True), PodState("c", phase=PodPhase.FAILED)]
    values = {"a": 2000, "b": 0, "c": 0}
    # b, c ignored (not missing): ratio 2 with 1 ready pod -> 2
    assert calc().pods_metric_replicas(3, 1000, values, pods, TOL).replicas == 2


def test_extra_metric_items_for_unlisted_pods_stay_in_the_average() -> None:
    values = {"a": 1000, "ghost": 3000}
    # avg 2000 -> ratio 2 -> ceil(2 * 1 ready pod) = 2
    assert calc().pods_metric_replicas(1, 1000, values, running("a"), TOL).replicas == 2


def test_no_metrics_for_ready_pods_is_an_error() -> None:
    pods = [PodState("a", phase=PodPhase.PENDING)]
    with pytest.raises(MetricUnavailable, match="did not receive metrics"):
        calc().pods_metric_replicas(1, 1000, {"a": 5}, pods, TOL)
    with pytest.raises(MetricUnavailable, match="no pods returned"):
        calc().pods_metric_replicas(1, 1000, {"a": 5}, [], TOL)


def test_resource_utilization_is_an_integer_percent() -> None:
    pods = [PodState(n, requests={"memory": 500}) for n in ("a", "b")]
    values = {"a": PodMetric(400), "b": PodMetric(451)}
    # (851*100)/1000 = 85 % (truncated) -> 85/50 = 1.7 -> ceil(3.4) = 4
    proposal = ReplicaCalculator(cpu_initialization_period=0).resource_replicas(
        2, 50, "memory", values, pods, TOL, now=1000.0
    )
    assert (proposal.replicas, proposal.utilization, proposal.usage) == (4, 85, 425)


def test_resource_missing_pods_on_scale_down_use_max_100_target() -> None:
    # target 200 %: missing pods count as request*200/100 = 2000 -> 4000*100/4000 = 100 %
    # -> ratio 0.5 -> ceil(0.5*4) = 2 (a 100 % fallback would give 1).
    pods = [PodState(n, requests={"memory": 1000}) for n in ("a", "b", "c", "d")]
    values = {"a": PodMetric(0), "b": PodMetric(0)}
    proposal = calc().resource_replicas(4, 200, "memory", values, pods, TOL, now=0.0)
    assert proposal.replicas == 2


def test_cpu_pod_in_initialisation_period_and_not_ready_is_unready() -> None:
    pods = [
        PodState("a", requests={"cpu": 1000}, start_time=0.0, ready_transition_time=10.0),
        PodState(
            "b", ready=False, requests={"cpu": 1000}, start_time=50.0, ready_transition_time=50.0
        ),
    ]
    values = {
        "a": PodMetric(2000, timestamp=90.0, window=30.0),
        "b": PodMetric(2000, timestamp=90.0),
    }
    # b is unready (Ready=False inside the 300 s init period): ratio 200/100 = 2 with 1 ready pod
    # and an unready one -> b counts 0 -> 2000*100/2000 = 100 % -> within -> keep 2.
    proposal = calc().resource_replicas(2, 100, "cpu", values, pods, TOL, now=100.0)
    assert proposal.replicas == 2
    # the same pods for memory: readiness is not looked at -> 200 % -> ceil(2*2) = 4
    mem_pods = [PodState(p.name, ready=p.ready, requests={"memory": 1000}) for p in pods]
    assert (
        calc().resource_replicas(2, 100, "memory", values, mem_pods, TOL, now=100.0).replicas == 4
    )


def test_resource_missing_request_is_an_error() -> None:
    with pytest.raises(MetricUnavailable, match="missing request"):
        calc().resource_replicas(1, 50, "memory", {"a": PodMetric(1)}, [PodState("a")], TOL, now=0)


def test_object_value_scales_ready_pods() -> None:
    pods = [PodState("a"), PodState("b"), PodState("c", ready=False)]
    # 30/10 = 3 times the target, 2 ready pods -> 6
    assert calc().object_value_replicas(3, 10_000, 30_000, pods, TOL).replicas == 6


def test_object_value_from_zero_replicas_ignores_pods() -> None:
    assert calc().object_value_replicas(0, 10_000, 25_000, [], TOL).replicas == 3


def test_object_average_value_uses_status_replicas() -> None:
    # 30 / (10 * 2) = 1.5 -> ceil(30/10) = 3; reported average ceil(30/2) = 15
    proposal = calc().per_pod_replicas(2, 10_000, 30_000, TOL)
    assert (proposal.replicas, proposal.usage) == (3, 15_000)


def test_external_value_sums_items() -> None:
    pods = [PodState("a"), PodState("b")]
    proposal = calc().external_value_replicas(2, 10_000, [10_000, 20_000], pods, TOL)
    assert (proposal.replicas, proposal.usage) == (6, 30_000)


def test_external_average_value() -> None:
    # 45 / (10 * 3) = 1.5 -> ceil(4.5) = 5
    assert calc().external_per_pod_replicas(3, 10_000, [45_000], TOL).replicas == 5
    # 31 / 30 inside the band -> keep status.replicas
    assert calc().external_per_pod_replicas(3, 10_000, [31_000], TOL).replicas == 3
