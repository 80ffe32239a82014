"""The real HPA controller scales trainer Deployments on our metrics, through the aggregator.

Each trainer pod reports `samples_per_second` at a per-pod rate the test sets (the load
generator); the adapter scrapes the pods, kube-apiserver proxies the HPA's queries to it, and
kube-controller-manager's HPA controller (1 s sync) changes the Deployment's replicas.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from edl_common.quantity import parse_quantity
from tests.e2e.harness.adapter import MetricsAdapter
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.session import E2ENamespace
from tests.e2e.harness.workloads import (
    TrainerJob,
    create_trainer_job,
    events_for,
    hpa_conditions,
    object_metric_hpa,
    pods_metric_hpa,
)
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

TARGET = "100"  # samples/s per replica
HIGH = 250.0  # per pod: 2.5x the target -> grow to max
LOW = 20.0  # per pod: 0.2x the target -> shrink to min
MIN, MAX = 1, 4


def _hpa(api: client.ApiClient, ns: str) -> Any:
    return client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("trainer", ns)


def _describe(api: client.ApiClient, ns: str, job: TrainerJob) -> Callable[[], str]:
    def describe() -> str:
        h = _hpa(api, ns)
        events = events_for(client.CoreV1Api(api), ns, "HorizontalPodAutoscaler", "trainer")
        lines = [
            f"deployment spec.replicas={job.spec_replicas()} ready={job.ready_replicas()}",
            f"hpa current={h.status.current_replicas} desired={h.status.desired_replicas}",
            f"hpa metrics={h.status.current_metrics}",
            f"hpa conditions={hpa_conditions(h)}",
            *[f"event {e.reason}: {e.message}" for e in events[-8:]],
        ]
        return "\n".join(lines)

    return describe


def _rescale_messages(api: client.ApiClient, ns: str) -> list[str]:
    events = events_for(client.CoreV1Api(api), ns, "HorizontalPodAutoscaler", "trainer")
    return [e.message for e in events if e.reason == "SuccessfulRescale"]


def _current_value(hpa: Any) -> float:
    m = hpa.status.current_metrics[0]
    current = m.pods.current if m.type == "Pods" else m.object.current
    return float(parse_quantity(current.average_value))


def _assert_hpa_query_logged(adapter: MetricsAdapter, ns: str) -> None:
    """The HPA's Pods query reached the adapter through the aggregator, protobuf-first."""
    lines = adapter.process.log.read_text(errors="replace").splitlines()
    queries = [line for line in lines if f"/namespaces/{ns}/pods/" in line and "GET" in line]
    assert queries, "no pods query from the HPA in the adapter's access log"
    from_hpa = [line for line in queries if "kube-controller-manager" in line]
    assert from_hpa, queries[-3:]
    assert all('accept="application/vnd.kubernetes.protobuf, */*"' in q for q in from_hpa), (
        from_hpa[-1]
    )
    assert all('" 200 ' in q for q in from_hpa[-3:]), from_hpa[-3:]


@pytest.mark.parametrize(
    ("kind", "reason_up"),
    [
        ("Pods", "pods metric samples_per_second above target"),
        # Object + AverageValue is reported under the controller's "external metric" label
        # (a quirk of horizontal.go), so only the metric name is checked.
        ("Object", "samples_per_second"),
    ],
)
def test_hpa_scales_trainers_up_and_down(
    kind: str, reason_up: str, e2e_ns: E2ENamespace, metrics_adapter: MetricsAdapter
) -> None:
    ns, api = e2e_ns.name, e2e_ns.api
    job = create_trainer_job(api, ns, e2e_ns.load_dir, replicas=MIN, samples_per_second=HIGH)
    build = pods_metric_hpa if kind == "Pods" else object_metric_hpa
    body = build("trainer", "trainer", "samples_per_second", TARGET, min_r=MIN, max_r=MAX)
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(ns, as_body(body))
    describe = _describe(api, ns, job)

    # More load than the target: the HPA grows the job to maxReplicas.
    wait_for(lambda: job.spec_replicas() == MAX, timeout_s=120, what="scale up", describe=describe)
    wait_for(
        lambda: job.ready_replicas() == MAX, timeout_s=60, what="pods ready", describe=describe
    )
    hpa = wait_for(
        lambda: (h := _hpa(api, ns)).status.current_replicas == MAX and h,
        timeout_s=30,
        what="HPA status at max",
        describe=describe,
    )
    conds = hpa_conditions(hpa)
    assert conds["AbleToScale"][0] == "True", conds
    assert conds["ScalingActive"][:2] == ("True", "ValidMetricFound"), conds
    assert hpa.status.current_metrics[0].type == kind
    assert _current_value(hpa) > float(TARGET)
    if kind == "Pods":
        _assert_hpa_query_logged(metrics_adapter, ns)
    ups = _rescale_messages(api, ns)
    assert ups and all("above target" in m and reason_up in m for m in ups), ups
    assert ups[-1].startswith(f"New size: {MAX};")
    # Still above target at max: the controller says it is limited by maxReplicas.
    wait_for(
        lambda: hpa_conditions(_hpa(api, ns))["ScalingLimited"][:2] == ("True", "TooManyReplicas"),
        timeout_s=30,
        what="ScalingLimited=TooManyReplicas",
        describe=describe,
    )

    # Less load: the HPA shrinks the job to minReplicas.
    job.set_load(LOW)
    wait_for(
        lambda: job.spec_replicas() == MIN, timeout_s=120, what="scale down", describe=describe
    )
    downs = [m for m in _rescale_messages(api, ns) if "All metrics below target" in m]
    assert downs, _rescale_messages(api, ns)
    hpa = wait_for(
        lambda: (h := _hpa(api, ns)).status.current_replicas == MIN and h,
        timeout_s=30,
        what="HPA status at min",
        describe=describe,
    )
    assert hpa.status.desired_replicas == MIN
    assert hpa_conditions(hpa)["ScalingActive"][0] == "True"
    assert hpa.status.last_scale_time is not None
    assert not e2e_ns.runner.errors


def test_hpa_freezes_while_adapter_is_down_and_recovers(
    e2e_ns: E2ENamespace, metrics_adapter: MetricsAdapter
) -> None:
    ns, api = e2e_ns.name, e2e_ns.api
    job = create_trainer_job(api, ns, e2e_ns.load_dir, replicas=2, samples_per_second=100.0)
    body = pods_metric_hpa("trainer", "trainer", "samples_per_second", TARGET, min_r=1, max_r=4)
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(ns, as_body(body))
    describe = _describe(api, ns, job)

    def settled() -> bool:
        h = _hpa(api, ns)
        active = hpa_conditions(h).get("ScalingActive", ("", "", ""))
        return active[:2] == ("True", "ValidMetricFound") and bool(h.status.current_metrics)

    wait_for(settled, timeout_s=60, what="HPA reading the metric", describe=describe)
    assert job.spec_replicas() == 2  # at target: within tolerance, no change

    try:
        metrics_adapter.stop()
        job.set_load(10.0)  # would shrink the job to 1 if the HPA could see it
        wait_for(
            lambda: (
                hpa_conditions(_hpa(api, ns))["ScalingActive"][:2]
                == ("False", "FailedGetPodsMetric")
            ),
            timeout_s=60,
            what="ScalingActive=False/FailedGetPodsMetric",
            describe=describe,
        )
        # No metrics -> no decision: the replica count holds (10 s = ~10 HPA syncs).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert job.spec_replicas() == 2, describe()
            time.sleep(0.5)  # the thing under test: the count holds over a period, not a moment
        reasons = {
            e.reason
            for e in events_for(client.CoreV1Api(api), ns, "HorizontalPodAutoscaler", "trainer")
        }
        assert "FailedGetPodsMetric" in reasons, reasons
        assert "SuccessfulRescale" not in reasons, reasons
    finally:
        if not metrics_adapter.process.alive():
            metrics_adapter.start()
            metrics_adapter.wait_available(timeout_s=60)

    # The adapter is back: the HPA sees the low load and scales down.
    wait_for(lambda: job.spec_replicas() == 1, timeout_s=120, what="recovery", describe=describe)
    assert hpa_conditions(_hpa(api, ns))["ScalingActive"][0] == "True"
