"""manifests/: `kubectl kustomize` renders base and overlay; they agree with the adapter's CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metrics_adapter.cli import build_parser, settings_from_args
from metrics_adapter.scraping.catalogue import MetricCatalogue
from tests.support.kustomize import render


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.slow
def test_base_has_every_piece() -> None:
    docs = render("manifests/base")
    (deploy,) = by_kind(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    assert by_kind(docs, "Service") and by_kind(docs, "PodDisruptionBudget")
    bindings = {
        (d["kind"], d["roleRef"]["name"], d["metadata"].get("namespace"))
        for d in docs
        if "roleRef" in d
    }
    assert ("ClusterRoleBinding", "system:auth-delegator", None) in bindings
    assert ("RoleBinding", "extension-apiserver-authentication-reader", "kube-system") in bindings
    assert ("RoleBinding", "edl-metrics-adapter-sizing-history", "edl-system") in bindings
    services = {d["metadata"]["name"]: d["spec"] for d in by_kind(docs, "APIService")}
    assert set(services) == {
        "v1beta2.custom.metrics.k8s.io",
        "v1beta1.custom.metrics.k8s.io",
        "v1beta1.external.metrics.k8s.io",
    }
    assert (
        services["v1beta2.custom.metrics.k8s.io"]["versionPriority"]
        > services["v1beta1.custom.metrics.k8s.io"]["versionPriority"]
    )
    for name, spec in services.items():
        assert name == f"{spec['version']}.{spec['group']}"
        assert spec["service"] == {
            "name": "edl-metrics-adapter",
            "namespace": "edl-system",
            "port": 443,
        }


@pytest.mark.slow
@pytest.mark.parametrize("path", ["manifests/base", "manifests/overlays/production"])
def test_deployment_args_are_valid_cli_options(path: str) -> None:
    docs = render(path)
    (deploy,) = by_kind(docs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["edl-adapter"]
    settings = settings_from_args(build_parser().parse_args(container["args"]))
    assert settings.tls and settings.port == 6443
    assert settings.metrics_config == Path("/etc/edl-adapter/catalogue.yaml")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/etc/edl-adapter" in mounts and "/var/run/serving-cert" in mounts


@pytest.mark.slow
def test_catalogue_configmap_is_the_built_in_catalogue() -> None:
    (cm,) = [d for d in render("manifests/base") if d["kind"] == "ConfigMap"]
    shipped = MetricCatalogue.from_yaml(cm["data"]["catalogue.yaml"])
    assert shipped == MetricCatalogue.default()


@pytest.mark.slow
def test_production_overlay_uses_a_ca_bundle() -> None:
    docs = render("manifests/overlays/production")
    for api in by_kind(docs, "APIService"):
        assert "insecureSkipTLSVerify" not in api["spec"]
        assert (
            api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            == "edl-system/edl-metrics-adapter"
        )
    (deploy,) = by_kind(docs, "Deployment")
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    assert volumes["serving-cert"]["secret"]["secretName"] == "edl-metrics-adapter-tls"


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    return {
        (group, resource, verb, name)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", ["*"])
    }


@pytest.mark.slow
def test_adapter_rbac_is_exactly_what_it_calls() -> None:
    docs = render("manifests/base")
    (cluster_role,) = [
        d for d in by_kind(docs, "ClusterRole") if d["metadata"]["name"] == "edl-metrics-adapter"
    ]
    assert _grants(cluster_role["rules"]) == {
        ("", "pods", "get", "*"),  # scraped pods and owners
        ("", "pods", "list", "*"),
        ("", "pods", "watch", "*"),
        ("apps", "replicasets", "get", "*"),
        ("", "nodes", "list", "*"),  # the sizer's capacity watch
        ("", "nodes", "watch", "*"),
        ("scheduling.k8s.io", "priorityclasses", "list", "*"),
        ("scheduling.k8s.io", "priorityclasses", "watch", "*"),
        ("apps", "deployments", "list", "*"),
        ("apps", "deployments", "watch", "*"),
        ("", "resourcequotas", "list", "*"),  # the plan stops at a namespace's quota
        ("", "resourcequotas", "watch", "*"),
        ("", "events", "create", "*"),  # an Event per decision
    }
    (role,) = [d for d in by_kind(docs, "Role") if d["metadata"]["name"].endswith("sizing-history")]
    assert role["metadata"]["namespace"] == "edl-system"
    assert _grants(role["rules"]) == {
        ("", "configmaps", "get", "edl-sizing-history"),
        ("", "configmaps", "update", "edl-sizing-history"),
        ("", "configmaps", "create", "*"),
    }
    (deploy,) = by_kind(docs, "Deployment")
    settings = settings_from_args(
        build_parser().parse_args(deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    )
    assert settings.sizing and settings.sizing_history_configmap == "edl-sizing-history"
