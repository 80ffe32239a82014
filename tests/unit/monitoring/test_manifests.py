"""manifests/monitoring: the monitors select what the adapter and the example trainer ship,
the scraper identity may read the adapter's /metrics, and the parameters are patchable."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.crd_schemas import prometheus_operator_schema
from tests.support.dashboards import MONITORING_DOC, ROOT
from tests.support.kustomize import render


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.slow
def test_the_monitoring_kustomization_has_every_piece() -> None:
    docs = render("manifests/monitoring")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "Secret",
            "ClusterRole",
            "ClusterRoleBinding",
            "PodMonitor",
            "ServiceMonitor",
            "PrometheusRule",
            "ConfigMap",
            "ConfigMap",
            "ConfigMap",
        ]
    )
    for kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for d in docs:
        if d["kind"] == "ConfigMap":
            assert d["metadata"]["namespace"] == "monitoring"


@pytest.mark.slow
def test_the_service_monitor_scrapes_the_adapter_with_the_scraper_token() -> None:
    docs = render("manifests/monitoring")
    base = render("manifests/base")
    monitor = one(docs, "ServiceMonitor")
    service = one(base, "Service")
    ns = service["metadata"]["namespace"]
    assert monitor["metadata"]["namespace"] == ns
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [ns]}
    assert matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert (endpoint["scheme"], endpoint["path"], endpoint["honorLabels"]) == (
        "https",
        "/metrics",
        True,
    )
    # `authorization` from a token Secret of the ServiceMonitor's namespace (the deprecated
    # bearerTokenFile is refused where arbitraryFSAccessThroughSMs.deny is set)...
    assert "bearerTokenFile" not in endpoint and "bearerTokenSecret" not in endpoint
    credentials = endpoint["authorization"]["credentials"]
    assert endpoint["authorization"]["type"] == "Bearer"
    secret, account = one(docs, "Secret"), one(docs, "ServiceAccount")
    assert (credentials["name"], credentials["key"]) == (secret["metadata"]["name"], "token")
    assert secret["metadata"]["namespace"] == account["metadata"]["namespace"] == ns
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": account["metadata"]["name"]
    }
    # ...whose ServiceAccount may get /metrics and nothing else.
    role, binding = one(docs, "ClusterRole"), one(docs, "ClusterRoleBinding")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": ns}
    ]


@pytest.mark.slow
def test_the_operator_objects_are_valid_for_the_pinned_crds() -> None:
    """What prometheus-operator v0.89's CRDs accept (strict: an unknown field is refused)."""
    schema = prometheus_operator_schema()
    docs = [d for d in render("manifests/monitoring") if d["apiVersion"].startswith("monitoring.")]
    assert {d["kind"] for d in docs} == {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    for doc in docs:
        assert schema.errors(doc) == []
    monitor = one(docs, "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["authorization"]["credential"] = {"name": "x", "key": "t"}
    assert schema.errors(monitor) == [
        "ServiceMonitor edl-metrics-adapter.spec.endpoints[0].authorization: "
        "unknown field 'credential'"
    ]


@pytest.mark.slow
def test_the_pod_monitor_scrapes_the_example_trainer_and_labels_its_job() -> None:
    monitor = one(render("manifests/monitoring"), "PodMonitor")["spec"]
    pod = one(render("manifests/examples/digits-trainer"), "Deployment")["spec"]["template"]
    assert monitor["namespaceSelector"] == {"any": True}
    assert matches(monitor["selector"]["matchLabels"], pod["metadata"]["labels"])
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    # `job` comes from the pod label the example sets.
    assert monitor["jobLabel"] == "edl.paddlepaddle.org/job"
    assert pod["metadata"]["labels"][monitor["jobLabel"]] == "digits"


@pytest.mark.slow
def test_the_deployment_label_is_cut_from_the_replica_set_name() -> None:
    (relabel,) = one(render("manifests/monitoring"), "PodMonitor")["spec"]["podMetricsEndpoints"][
        0
    ]["relabelings"]
    assert relabel["targetLabel"] == "deployment"
    joined = ";".join  # Prometheus joins the source labels with ";" and anchors the regex

    def deployment(kind: str, name: str) -> str | None:
        m = re.fullmatch(relabel["regex"], joined([kind, name]))
        return m.expand(relabel["replacement"].replace("$1", r"\1")) if m else None

    assert deployment("ReplicaSet", "digits-trainer-7d9f5c8b4") == "digits-trainer"
    assert deployment("ReplicaSet", "a-b-c-5f6b7") == "a-b-c"
    assert deployment("StatefulSet", "digits-trainer") is None
    assert relabel["sourceLabels"] == [
        "__meta_kubernetes_pod_controller_kind",
        "__meta_kubernetes_pod_controller_name",
    ]


@pytest.mark.slow
def test_the_example_overlay_sets_the_release_and_the_grafana_namespace() -> None:
    plain = render("manifests/monitoring")
    overlay = render("manifests/examples/monitoring-release")
    assert len(plain) == len(overlay)
    for before, after in zip(plain, overlay, strict=True):
        kind = after["kind"]
        if after["apiVersion"].startswith("monitoring.coreos.com/"):
            assert after["metadata"]["labels"]["release"] == "prometheus"
            before["metadata"]["labels"]["release"] = "prometheus"
        if kind == "ConfigMap":
            assert after["metadata"]["namespace"] == "grafana"
            before["metadata"]["namespace"] = "grafana"
        assert before == after, kind  # nothing else changed


def test_the_docs_show_the_example_overlay_verbatim() -> None:
    overlay = (ROOT / "manifests/examples/monitoring-release/kustomization.yaml").read_text()
    body = "\n".join(line for line in overlay.splitlines() if not line.startswith("#"))
    assert body.strip() in MONITORING_DOC.read_text()
