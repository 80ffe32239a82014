"""Our metrics, read through the real kube-apiserver's aggregation layer with kubectl."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import pytest
from kubernetes import client

from edl_common.quantity import parse_quantity
from tests.e2e.harness.adapter import MetricsAdapter
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import create_trainer_job
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

RATE = 50.0
HPA_ACCEPT = "application/vnd.kubernetes.protobuf, */*"


def _near(value: str, expected: float, rel: float = 0.15) -> bool:
    return abs(parse_quantity(value) - Decimal(str(expected))) <= Decimal(str(expected * rel))


def test_pods_object_and_external_metrics_via_kubectl(
    e2e_ns: E2ENamespace,
    metrics_adapter: MetricsAdapter,
    kubectl: Kubectl,
    control_plane: ControlPlane,
) -> None:
    ns = e2e_ns.name
    job = create_trainer_job(e2e_ns.api, ns, e2e_ns.load_dir, replicas=2, samples_per_second=RATE)
    wait_for(lambda: job.ready_replicas() == 2, timeout_s=60, what="2 ready trainer pods")
    pods = client.CoreV1Api(e2e_ns.api).list_namespaced_pod(ns, label_selector="job=trainer")
    names = {p.metadata.name for p in pods.items}
    selector = quote("app=trainer,job=trainer")

    # Pods metric, v1beta2 (the preferred version), '*' sent literally by kubectl.
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/samples_per_second"

    def pods_at_rate() -> dict[str, Any] | None:
        body = json.loads(kubectl("get", "--raw", f"{path}?labelSelector={selector}"))
        items = body["items"]
        ok = len(items) == 2 and all(_near(i["value"], RATE) for i in items)
        return body if ok else None

    body = wait_for(pods_at_rate, timeout_s=60, what=f"2 pods at ~{RATE} samples/s")
    assert body["kind"] == "MetricValueList"
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta2"
    for item in body["items"]:
        assert item["describedObject"]["kind"] == "Pod"
        assert item["describedObject"]["namespace"] == ns
        assert item["describedObject"]["name"] in names
        assert item["metric"]["name"] == "samples_per_second"
        assert item["timestamp"].endswith("Z")

    # The HPA (kube-controller-manager's default --kube-api-content-type) sends
    # `Accept: application/vnd.kubernetes.protobuf, */*`; the adapter answers JSON anyway.
    r = control_plane.request(
        "GET",
        f"{path}?labelSelector={selector}",
        headers={"Accept": HPA_ACCEPT},
    )
    assert r.headers["Content-Type"].startswith("application/json")
    assert len(r.json()["items"]) == 2

    # The same through v1beta1, with '*' percent-encoded: the older item shape.
    old = json.loads(
        kubectl(
            "get",
            "--raw",
            f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{ns}/pods/%2A/samples_per_second"
            f"?labelSelector={selector}",
        )
    )
    assert old["apiVersion"] == "custom.metrics.k8s.io/v1beta1"
    assert {i["describedObject"]["name"] for i in old["items"]} == names
    assert all(i["metricName"] == "samples_per_second" for i in old["items"])

    # A selector that matches nothing must not leak other pods.
    none = json.loads(
        kubectl("get", "--raw", f"{path}?labelSelector={quote('app=trainer,job=other')}")
    )
    assert none["items"] == []

    # Object metric on the Deployment: the job's total (sum over its pods).
    obj = json.loads(
        kubectl(
            "get",
            "--raw",
            f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/deployments.apps/trainer/"
            "samples_per_second",
        )
    )
    assert len(obj["items"]) == 1
    assert obj["items"][0]["describedObject"]["kind"] == "Deployment"
    assert _near(obj["items"][0]["value"], 2 * RATE)

    # External metric: the same sum, chosen by a label selector.
    ext = json.loads(
        kubectl(
            "get",
            "--raw",
            f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/job_samples_per_second"
            f"?labelSelector={quote('job=trainer')}",
        )
    )
    assert ext["kind"] == "ExternalMetricValueList"
    assert sum(parse_quantity(i["value"]) for i in ext["items"]) > Decimal(str(1.7 * RATE))


def test_discovery_and_errors_via_kubectl(
    metrics_adapter: MetricsAdapter, kubectl: Kubectl
) -> None:
    assert all(status == "True" for status, _ in metrics_adapter.availability().values())
    groups = json.loads(kubectl("get", "--raw", "/apis/custom.metrics.k8s.io"))
    assert groups["preferredVersion"]["version"] == "v1beta2"
    resources = json.loads(kubectl("get", "--raw", "/apis/custom.metrics.k8s.io/v1beta2"))
    assert resources["kind"] == "APIResourceList"
    assert resources["resources"], "an empty APIResourceList breaks discovery"
    # An unknown metric is a NotFound Status, relayed by the aggregator.
    with pytest.raises(AssertionError, match=r"NotFound|not found|404"):
        kubectl(
            "get",
            "--raw",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/no_such_metric",
        )
