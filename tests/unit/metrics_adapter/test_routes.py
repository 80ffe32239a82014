"""Handler tests: every route, version and error, as a table of path -> status and item count."""

from __future__ import annotations

import json

import pytest

from edl_common.quantity import parse_quantity
from tests.unit.metrics_adapter.helpers import T0, standard

CM = "/apis/custom.metrics.k8s.io"
B1, B2 = f"{CM}/v1beta1", f"{CM}/v1beta2"
EXT = "/apis/external.metrics.k8s.io/v1beta1"
PODS = f"{B2}/namespaces/ml/pods"
DEPLOY = f"{B2}/namespaces/ml/deployments.apps"

TABLE = [
    # (path, status, item count; None for errors and non-lists)
    # Pods metrics, both versions, `*` plain and percent-encoded, label selectors
    (f"{PODS}/*/samples_per_second", 200, 3),
    (f"{PODS}/%2A/samples_per_second", 200, 3),
    (f"{PODS}/%2a/samples_per_second", 200, 3),
    (f"{B1}/namespaces/ml/pods/*/samples_per_second", 200, 3),
    (f"{PODS}/*/samples_per_second?labelSelector=app%3Dtrainer", 200, 2),
    (f"{PODS}/*/samples_per_second?labelSelector=app%3D%3Dtrainer", 200, 2),
    (f"{PODS}/*/samples_per_second?labelSelector=app+in+(trainer,x)", 200, 2),
    (f"{PODS}/*/samples_per_second?labelSelector=app+notin+(trainer)", 200, 1),
    (f"{PODS}/*/samples_per_second?labelSelector=app!%3Dtrainer", 200, 1),
    (f"{PODS}/*/samples_per_second?labelSelector=!app", 200, 0),
    (f"{PODS}/*/samples_per_second?labelSelector=app", 200, 3),
    (f"{PODS}/*/samples_per_second?labelSelector=", 200, 3),
    (f"{PODS}/*/samples_per_second?labelSelector=app%3Dtrainer,tier%3Dx", 200, 0),
    (f"{B2}/namespaces/empty/pods/*/samples_per_second", 200, 0),
    (f"{PODS}/trainer-0/samples_per_second", 200, 1),
    (f"{B1}/namespaces/ml/pods/trainer-1/step_seconds", 200, 1),
    (f"{PODS}/trainer-0/samples_per_second?labelSelector=app%3Dother", 404, None),
    (f"{PODS}/trainer-2/samples_per_second", 404, None),  # known pod, no data yet
    (f"{PODS}/ghost/samples_per_second", 404, None),
    (f"{PODS}/*/gpu_utilization?metricLabelSelector=gpu%3D0", 200, 3),
    (f"{PODS}/*/gpu_utilization?metricLabelSelector=gpu%3D9", 200, 0),
    (f"{PODS}/*/unknown_metric", 404, None),
    (f"{PODS}/*/busy_accelerators", 404, None),  # external-only metric
    # Object metrics on named objects and `*`
    (f"{DEPLOY}/trainer/samples_per_second", 200, 1),
    (f"{B1}/namespaces/ml/deployments.apps/trainer/comm_time_ratio", 200, 1),
    (f"{DEPLOY}/*/samples_per_second", 200, 2),
    (f"{DEPLOY}/%2A/samples_per_second?labelSelector=app%3Dother", 200, 1),
    (f"{B2}/namespaces/ml/replicasets.apps/trainer-7d9f/steps_per_second", 200, 1),
    (f"{DEPLOY}/ghost/samples_per_second", 404, None),
    (f"{B2}/namespaces/ml/deployments/trainer/samples_per_second", 404, None),
    # Namespace metrics and root-scoped objects
    (f"{B2}/namespaces/ml/metrics/samples_per_second", 200, 1),
    (f"{B1}/namespaces/ml/metrics/step_seconds", 200, 1),
    (f"{B2}/namespaces/empty/metrics/samples_per_second", 404, None),
    (f"{B2}/namespaces/ml/metrics/unknown_metric", 404, None),
    (f"{B2}/namespaces/ml/metrics/samples_per_second/extra", 400, None),  # bad object name
    (f"{B2}/namespaces/*/metrics/samples_per_second", 400, None),
    (f"{B2}/namespaces/ml/pods/bar", 404, None),
    (f"{B2}/namespaces/ml/samples_per_second/x", 404, None),
    (f"{B2}/namespaces/ml/x/samples_per_second", 404, None),
    (f"{B2}/namespaces/ml/samples_per_second/x/y/z", 404, None),
    (f"{B2}/namespaces/ml/samples_per_second", 200, 1),  # root-scoped Namespace object
    (f"{B2}/namespaces/*/samples_per_second", 200, 1),
    (f"{B2}/nodes/node-1/samples_per_second", 200, 1),
    (f"{B2}/nodes/*/samples_per_second?labelSelector=app%3Dtrainer", 200, 1),
    (f"{B2}/nodes/node-9/samples_per_second", 404, None),
    (f"{B2}/services/web/samples_per_second", 404, None),
    (f"{B2}/nodes/foo", 404, None),
    # External metrics
    (f"{EXT}/namespaces/ml/job_samples_per_second", 200, 1),
    (f"{EXT}/namespaces/ml/job_samples_per_second?labelSelector=app%3Dtrainer", 200, 1),
    (f"{EXT}/namespaces/ml/busy_accelerators?labelSelector=app%3Dnobody", 200, 0),
    (f"{EXT}/namespaces/ml/busy_cpus", 200, 1),
    (f"{EXT}/namespaces/ml/samples_per_second", 404, None),  # custom-only metric
    (f"{EXT}/namespaces/ml/unknown", 404, None),
    (f"{EXT}/namespaces/foo/group/metric", 404, None),
    (f"{EXT}/namespaces/ml/job_samples_per_second?labelSelector=a+in+(", 400, None),
    # Discovery, health, OpenAPI
    ("/", 200, None),
    ("/apis", 200, None),
    ("/apis/", 200, None),
    (CM, 200, None),
    ("/apis/external.metrics.k8s.io", 200, None),
    (B1, 200, None),
    (B2, 200, None),
    (f"{B2}/", 200, None),
    (EXT, 200, None),
    (f"{CM}/v1", 404, None),
    ("/apis/metrics.k8s.io/v1beta1", 404, None),
    ("/apis/external.metrics.k8s.io/v1beta2", 404, None),
    ("/openapi/v2", 404, None),
    ("/openapi/v3", 404, None),
    ("/openapi/v3/apis/custom.metrics.k8s.io/v1beta2", 404, None),
    ("/version", 200, None),
    ("/healthz", 200, None),
    ("/livez", 200, None),
    ("/readyz", 200, None),
    ("/api/v1/pods", 404, None),
    ("/nothing", 404, None),
    # Malformed input
    (f"{PODS}/*/samples_per_second?labelSelector=app%3D", 200, 0),
    (f"{PODS}/*/samples_per_second?labelSelector=app%3D%3D%3D", 400, None),
    (f"{PODS}/*/samples_per_second?labelSelector=(", 400, None),
    (f"{PODS}/*/samples_per_second?labelSelector=a+in+()", 200, 0),  # the empty value, as kube does
    (f"{PODS}/*/samples_per_second?labelSelector=v%3E-1", 400, None),
    (f"{PODS}/*/samples_per_second?labelSelector=-bad%3Dx", 400, None),
    (f"{PODS}/*/samples_per_second?metricLabelSelector=gpu+in", 400, None),
    (f"{PODS}/*/samples_per_second?labelSelector=%ff", 400, None),
    (f"{PODS}/*/bad%20metric", 400, None),
    (f"{PODS}/*/bad%2Fmetric", 400, None),
    (f"{PODS}/a%2Fb/samples_per_second", 400, None),
    (f"{PODS}/%ff/samples_per_second", 400, None),
    (f"{PODS}/%zz/samples_per_second", 400, None),
    (f"{PODS}/UPPER/samples_per_second", 400, None),
    (f"{B2}/namespaces/Bad_NS/pods/*/samples_per_second", 400, None),
    (f"{B2}/namespaces/ml//*/samples_per_second", 400, None),
    (f"{B2}/namespaces/ml/pods/*/" + "m" * 300, 400, None),
    (f"{B2}/namespaces/" + "n" * 64 + "/pods/*/samples_per_second", 400, None),
    (f"{PODS}/*/samples_per_second%00", 400, None),
]


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    return standard().app.test_client()


@pytest.mark.parametrize(("path", "code", "count"), TABLE)
def test_table(client, path: str, code: int, count: int | None) -> None:  # type: ignore[no-untyped-def]
    resp = client.get(path, headers={"Accept": "application/vnd.kubernetes.protobuf, */*"})
    assert resp.status_code == code, resp.get_data(as_text=True)
    if path.endswith(("z", "z/")) and code == 200:
        return
    if path in ("/openapi/v2",) or code != 200:
        body = resp.get_json()
        assert body["kind"] == "Status"
        assert body["code"] == code
        assert body["status"] == "Failure"
        assert body["reason"] in ("NotFound", "BadRequest")
        assert body["message"]
    if count is not None:
        assert resp.mimetype == "application/json"
        assert len(resp.get_json()["items"]) == count


def test_v1beta2_item_shape(client) -> None:  # type: ignore[no-untyped-def]
    body = client.get(f"{PODS}/trainer-0/samples_per_second").get_json()
    assert body["kind"] == "MetricValueList"
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta2"
    assert body["metadata"] == {}
    (item,) = body["items"]
    assert item == {
        "describedObject": {
            "kind": "Pod",
            "namespace": "ml",
            "name": "trainer-0",
            "apiVersion": "v1",
        },
        "metric": {"name": "samples_per_second", "selector": None},
        "timestamp": "2027-01-15T08:00:10Z",
        "windowSeconds": 30,
        "value": "100",
    }


def test_v1beta1_item_shape(client) -> None:  # type: ignore[no-untyped-def]
    body = client.get(f"{B1}/namespaces/ml/pods/trainer-0/step_seconds").get_json()
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta1"
    (item,) = body["items"]
    assert list(item) == [
        "describedObject",
        "metricName",
        "timestamp",
        "window",
        "value",
        "selector",
    ]
    assert item["metricName"] == "step_seconds"
    assert item["selector"] is None
    assert item["window"] == 30
    assert item["value"] == "250m"
    assert "selector" in json.dumps(item)


def test_object_metric_aggregates_owned_pods(client) -> None:  # type: ignore[no-untyped-def]
    body = client.get(f"{DEPLOY}/trainer/samples_per_second").get_json()
    (item,) = body["items"]
    assert item["describedObject"] == {
        "kind": "Deployment",
        "namespace": "ml",
        "name": "trainer",
        "apiVersion": "apps/v1",
    }
    assert float(parse_quantity(item["value"])) == pytest.approx(150.0)  # sum of 100 and 50
    mean = client.get(f"{DEPLOY}/trainer/gpu_utilization").get_json()["items"][0]
    assert float(parse_quantity(mean["value"])) == pytest.approx((0.7 + 0.3) / 2)


def test_external_item_shape(client) -> None:  # type: ignore[no-untyped-def]
    body = client.get(
        f"{EXT}/namespaces/ml/busy_accelerators?labelSelector=app%3Dtrainer"
    ).get_json()
    assert body["kind"] == "ExternalMetricValueList"
    (item,) = body["items"]
    assert item["metricName"] == "busy_accelerators"
    assert item["metricLabels"] == {"app": "trainer"}
    assert float(parse_quantity(item["value"])) == pytest.approx(0.8 + 0.6 + 0.4 + 0.2)
    unlabelled = client.get(f"{EXT}/namespaces/ml/busy_cpus").get_json()["items"][0]
    assert unlabelled["metricLabels"] is None


def test_timestamps_are_sample_times(client) -> None:  # type: ignore[no-untyped-def]
    item = client.get(f"{PODS}/trainer-0/samples_per_second").get_json()["items"][0]
    assert item["timestamp"] == "2027-01-15T08:00:10Z"
    assert T0 + 10 == 1_800_000_010.0


def test_resource_list_is_non_empty(client) -> None:  # type: ignore[no-untyped-def]
    for path, kind in (
        (B2, "MetricValueList"),
        (B1, "MetricValueList"),
        (EXT, "ExternalMetricValueList"),
    ):
        body = client.get(path).get_json()
        assert body["kind"] == "APIResourceList"
        assert body["resources"]
        assert {r["kind"] for r in body["resources"]} == {kind}
    names = {r["name"] for r in client.get(B2).get_json()["resources"]}
    assert {"pods/samples_per_second", "deployments.apps/samples_per_second"} <= names


def test_group_prefers_v1beta2(client) -> None:  # type: ignore[no-untyped-def]
    body = client.get(CM).get_json()
    assert body["preferredVersion"]["version"] == "v1beta2"
    groups = {g["name"] for g in client.get("/apis").get_json()["groups"]}
    assert groups == {"custom.metrics.k8s.io", "external.metrics.k8s.io"}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize(
    "path", [f"{PODS}/*/samples_per_second", B2, "/apis", "/healthz", "/bad/%zz"]
)
def test_methods_other_than_get_are_405(client, method: str, path: str) -> None:  # type: ignore[no-untyped-def]
    resp = client.open(path, method=method, data=b"{}")
    assert resp.status_code == 405
    assert resp.get_json()["reason"] == "MethodNotAllowed"


def test_head_has_no_body(client) -> None:  # type: ignore[no-untyped-def]
    resp = client.head(f"{PODS}/*/samples_per_second")
    assert resp.status_code == 200
    assert resp.get_data() == b""


def test_stale_values_expire() -> None:
    h = standard()
    c = h.app.test_client()
    assert len(c.get(f"{PODS}/*/samples_per_second").get_json()["items"]) == 3
    h.clock.t += 31  # stale_after is 30 s in the harness
    assert c.get(f"{PODS}/*/samples_per_second").get_json()["items"] == []
    assert c.get(f"{DEPLOY}/trainer/samples_per_second").status_code == 404


def test_readyz_waits_for_pod_sync() -> None:
    from tests.unit.metrics_adapter.helpers import build

    h = build([])
    h.pods.synced = False
    assert h.app.test_client().get("/readyz").status_code == 503
    h.pods.synced = True
    assert h.app.test_client().get("/readyz").status_code == 200


def test_self_metrics_record_latency_by_route_and_code(client) -> None:  # type: ignore[no-untyped-def]
    client.get(f"{PODS}/*/samples_per_second")
    client.get(f"{PODS}/*/nope")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'edl_adapter_request_duration_seconds_count{code="200",route="v1beta2/pods"}' in text
    assert 'edl_adapter_request_duration_seconds_count{code="404",route="v1beta2/pods"}' in text
    assert "edl_adapter_sample_age_seconds_bucket" in text


def test_self_metrics_keep_only_the_series_named_by_name_brackets(client) -> None:  # type: ignore[no-untyped-def]
    client.get(f"{PODS}/*/samples_per_second")
    names = "name[]=edl_adapter_request_duration_seconds_count&name[]=edl_adapter_pods"
    text = client.get(f"/metrics?{names}").get_data(as_text=True)
    series = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert series == {"edl_adapter_request_duration_seconds_count", "edl_adapter_pods"}
    whole = client.get("/metrics").get_data(as_text=True)
    assert "edl_adapter_sample_age_seconds_bucket" in whole and len(whole) > len(text)
