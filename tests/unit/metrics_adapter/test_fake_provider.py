"""The shipped FakeProvider, served through the real app as a user's test would."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from prometheus_client import CollectorRegistry

from metrics_adapter.api.flask_app import create_app
from metrics_adapter.auth.authn import DelegatingAuthenticator
from metrics_adapter.auth.authz import AlwaysAllowAuthorizer
from metrics_adapter.options import default_settings
from metrics_adapter.providers.fake import FakeProvider
from metrics_adapter.selfmetrics import AdapterMetrics

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0
B2 = "/apis/custom.metrics.k8s.io/v1beta2"
EXT = "/apis/external.metrics.k8s.io/v1beta1"


def client_for(fake: FakeProvider) -> FlaskClient:
    app = create_app(
        default_settings(),
        fake,
        AdapterMetrics(CollectorRegistry()),
        DelegatingAuthenticator([]),
        AlwaysAllowAuthorizer(),
        clock=lambda: T0,
    )
    return app.test_client()


def fake_with_trainers() -> FakeProvider:
    fake = FakeProvider(clock=lambda: T0)
    for i, value in enumerate([100.0, 140.0]):
        fake.set_custom("pods", f"trainer-{i}", "samples_per_second", value, namespace="ml",
                        labels={"app": "trainer"})  # fmt: skip
    fake.set_custom("pods", "web-0", "samples_per_second", 5.0, namespace="ml",
                    labels={"app": "web"})  # fmt: skip
    fake.set_custom("deployments.apps", "trainer", "desired_replicas", 3, namespace="ml")
    fake.set_external("ml", "desired_replicas", 3, labels={"job": "digits"})
    fake.set_external("ml", "desired_replicas", 5, labels={"job": "other"})
    return fake


def test_an_hpa_style_list_read_gets_the_values_the_test_set() -> None:
    body = (
        client_for(fake_with_trainers())
        .get(f"{B2}/namespaces/ml/pods/*/samples_per_second?labelSelector=app%3Dtrainer")
        .get_json()
    )
    assert body["kind"] == "MetricValueList"
    values = {i["describedObject"]["name"]: i["value"] for i in body["items"]}
    assert values == {"trainer-0": "100", "trainer-1": "140"}
    assert body["items"][0]["describedObject"] == {
        "kind": "Pod", "namespace": "ml", "name": "trainer-0", "apiVersion": "v1"
    }  # fmt: skip


def test_an_object_metric_on_a_deployment_and_the_404_of_an_unknown_object() -> None:
    client = client_for(fake_with_trainers())
    (item,) = client.get(
        f"{B2}/namespaces/ml/deployments.apps/trainer/desired_replicas"
    ).get_json()["items"]
    assert item["describedObject"]["kind"] == "Deployment" and item["value"] == "3"
    missing = client.get(f"{B2}/namespaces/ml/deployments.apps/nope/desired_replicas")
    assert missing.status_code == 404 and missing.get_json()["kind"] == "Status"


def test_external_items_are_filtered_by_the_metric_selector_and_replaced_by_labels() -> None:
    fake = fake_with_trainers()
    fake.set_external("ml", "desired_replicas", 4, labels={"job": "digits"})  # replaces 3
    client = client_for(fake)
    items = client.get(
        f"{EXT}/namespaces/ml/desired_replicas?labelSelector=job%3Ddigits"
    ).get_json()["items"]
    assert [(i["metricLabels"], i["value"]) for i in items] == [({"job": "digits"}, "4")]


def test_discovery_lists_what_has_values_and_clear_forgets_them() -> None:
    fake = fake_with_trainers()
    client = client_for(fake)
    names = {r["name"] for r in client.get(B2).get_json()["resources"]}
    assert {"pods/samples_per_second", "deployments.apps/desired_replicas"} <= names
    fake.clear()
    after = {r["name"] for r in client.get(B2).get_json()["resources"]}
    assert not {"pods/samples_per_second", "deployments.apps/desired_replicas"} & after
    assert client.get(f"{EXT}/namespaces/ml/desired_replicas").status_code == 404
