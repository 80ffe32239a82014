"""The provider seam: a composite serves each metric from its provider; discovery follows."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client import CollectorRegistry

from edl_sizing import Job, Node, Resources, StaticCapacitySource
from edl_sizing.capacity import ClusterSnapshot
from edl_sizing.decision import SizingPolicy
from edl_sizing.events import LogEventRecorder
from edl_sizing.history import MemoryHistoryStore
from metrics_adapter.api.flask_app import create_app
from metrics_adapter.auth.authn import DelegatingAuthenticator
from metrics_adapter.auth.authz import AlwaysAllowAuthorizer
from metrics_adapter.errors import NotFoundError
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.options import default_settings
from metrics_adapter.providers.fake import FakeProvider
from metrics_adapter.providers.protocol import (
    CompositeProvider,
    CustomMetricInfo,
    MetricsProvider,
)
from metrics_adapter.providers.sizing import SizingProvider
from metrics_adapter.selfmetrics import AdapterMetrics
from metrics_adapter.sizing.kube_objects import JOB_LABEL
from metrics_adapter.sizing.metrics import SizingMetrics
from metrics_adapter.sizing.sizer import Sizer
from tests.unit.metrics_adapter.helpers import T0, ManualClock, standard

EXT = "/apis/external.metrics.k8s.io/v1beta1"
B2 = "/apis/custom.metrics.k8s.io/v1beta2"


def fake_provider() -> FakeProvider:
    """``queue_depth`` on nodes (root-scoped) and the external ``samples_per_second_x``;
    ``busy_cpus`` is also the catalogue's: the first provider (the scraped pods) wins."""
    fake = FakeProvider(clock=lambda: T0)
    fake.set_custom("nodes", "node-1", "queue_depth", 7.0)
    fake.set_external("ml", "samples_per_second_x", 3.0, labels={"from": "fake"})
    fake.set_external("ml", "busy_cpus", 99.0, labels={"from": "fake"})
    return fake


def app_with(*extra: MetricsProvider, debug: dict[str, Any] | None = None) -> FlaskClient:
    scraped = standard()
    provider = CompositeProvider([scraped.provider, *extra])
    app = create_app(
        default_settings(),
        provider,
        AdapterMetrics(CollectorRegistry()),
        DelegatingAuthenticator([]),
        AlwaysAllowAuthorizer(),
        clock=scraped.clock,
        debug_pages=debug,
    )
    return app.test_client()


def test_discovery_is_the_union_of_the_providers_lists() -> None:
    client = app_with(fake_provider())
    custom = {(r["name"], r["namespaced"]) for r in client.get(B2).get_json()["resources"]}
    assert ("nodes/queue_depth", False) in custom
    assert ("pods/samples_per_second", True) in custom
    assert ("namespaces/samples_per_second", False) in custom
    external = [r["name"] for r in client.get(EXT).get_json()["resources"]]
    assert external.count("busy_cpus") == 1 and "samples_per_second_x" in external


def test_each_metric_comes_from_the_provider_listing_it() -> None:
    client = app_with(fake_provider())
    (item,) = client.get(f"{B2}/nodes/node-1/queue_depth").get_json()["items"]
    assert item["describedObject"]["kind"] == "Node" and item["value"] == "7"
    assert client.get(f"{B2}/nodes/node-2/queue_depth").status_code == 404
    fake = client.get(f"{EXT}/namespaces/ml/samples_per_second_x").get_json()["items"]
    assert fake[0]["metricLabels"] == {"from": "fake"}
    scraped = client.get(f"{EXT}/namespaces/ml/busy_cpus").get_json()["items"]
    assert scraped[0]["metricLabels"] is None  # the catalogue's, not the fake's
    pods = client.get(f"{B2}/namespaces/ml/pods/*/samples_per_second").get_json()["items"]
    assert len(pods) == 3  # trainer-0, trainer-1 and other-0 have data


def test_unknown_metrics_are_a_not_found_status() -> None:
    client = app_with(fake_provider())
    for path in (f"{B2}/namespaces/ml/pods/*/nope", f"{EXT}/namespaces/ml/nope"):
        r = client.get(path)
        assert r.status_code == 404
        body = r.get_json()
        assert (
            body["kind"] == "Status" and body["reason"] == "NotFound" and "nope" in body["message"]
        )


def test_debug_pages() -> None:
    client = app_with(debug={"sizing": lambda: {"plan": {"jobs": []}}})
    assert client.get("/debug/sizing").get_json() == {"plan": {"jobs": []}}
    assert client.get("/debug/other").status_code == 404
    assert client.post("/debug/sizing").status_code == 405


def test_desired_replicas_through_the_app() -> None:
    clock = ManualClock()
    job = Job("ml", "trainer", Resources(cpu=1), replicas=1, max_replicas=4)
    source = StaticCapacitySource(
        ClusterSnapshot((Node("n1", Resources(cpu=4)),), (), (job,), {job.key: "digits"})
    )
    sizer = Sizer(source, MemoryHistoryStore(), SizingPolicy(), SizingMetrics(CollectorRegistry()),
                  LogEventRecorder(), clock)  # fmt: skip
    sizer.run_once()
    provider = SizingProvider(sizer, clock, 60.0)
    client = app_with(provider, debug={"sizing": provider.debug_page})
    url = f"{EXT}/namespaces/ml/desired_replicas?labelSelector={JOB_LABEL}%3Ddigits"
    (item,) = client.get(url).get_json()["items"]
    assert item == {
        "metricName": "desired_replicas",
        "metricLabels": {JOB_LABEL: "digits"},
        "timestamp": "2027-01-15T08:00:00Z",
        "window": 10,
        "value": "2",
    }
    names = [r["name"] for r in client.get(EXT).get_json()["resources"]]
    assert "desired_replicas" in names
    page = client.get("/debug/sizing").get_json()
    assert page["plan"]["jobs"][0]["message"].startswith("grew to 2")
    with pytest.raises(NotFoundError):
        provider.get_metric_by_selector(
            "ml", LabelSelector(), CustomMetricInfo("pods", True, "desired_replicas"),
            LabelSelector(),
        )  # fmt: skip
