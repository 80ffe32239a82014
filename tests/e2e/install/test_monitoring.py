"""manifests/monitoring against the real kube-apiserver: prometheus-operator's CRDs (as its Go
module v0.89.0 ships them) accept every object under strict validation and reject a misspelt
field; the scraper ServiceAccount's token (the one its Secret holds and the ServiceMonitor
sends) reads the real adapter's SAR-protected /metrics exactly when the shipped
ClusterRoleBinding exists; kube-apiserver
exports the series the APIService alert reads, for EDL's three APIServices."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.e2e.harness.adapter import MetricsAdapter
from tests.e2e.harness.session import Kubectl
from tests.support.cached_scripts import cached_path
from tests.support.kustomize import render
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

CRD_KINDS = ("podmonitors", "servicemonitors", "prometheusrules")
NAMESPACES = ("edl-system", "monitoring", "grafana")


def _crd_folder() -> Path:
    return cached_path("fetch-prometheus-operator-crds.sh", timeout_s=300)


@pytest.fixture(scope="module")
def operator_crds(kubectl: Kubectl) -> Iterator[None]:
    folder = _crd_folder()
    for kind in CRD_KINDS:
        path = folder / f"monitoring.coreos.com_{kind}.yaml"
        kubectl("apply", "--server-side", "-f", str(path), timeout_s=60)
    for kind in CRD_KINDS:
        kubectl(
            "wait",
            "--for=condition=Established",
            f"crd/{kind}.monitoring.coreos.com",
            "--timeout=60s",
            timeout_s=70,
        )
    existing = kubectl("get", "namespaces", "-o", "name").split()
    for ns in NAMESPACES:
        if f"namespace/{ns}" not in existing:
            kubectl("create", "namespace", ns)
    yield


def _dry_run(kubectl: Kubectl, docs: list[dict[str, Any]], tmp_path: Path) -> str:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(path), timeout_s=60)


@pytest.mark.parametrize(
    "kustomization", ["manifests/monitoring", "manifests/examples/monitoring-release"]
)
def test_the_operator_crds_accept_every_monitoring_object(
    operator_crds: None, kubectl: Kubectl, tmp_path: Path, kustomization: str
) -> None:
    docs = render(kustomization)
    out = _dry_run(kubectl, docs, tmp_path)
    assert out.count("(server dry run)") == len(docs), out
    for kind in ("podmonitor", "servicemonitor", "prometheusrule"):
        assert re.search(rf"^{kind}\.monitoring\.coreos\.com/\S+ created", out, re.M), out


def test_the_schema_check_rejects_what_the_operator_would_not_read(
    operator_crds: None, kubectl: Kubectl, tmp_path: Path
) -> None:
    docs = render("manifests/monitoring")
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(AssertionError, match="unknown field"):
        _dry_run(kubectl, [typo], tmp_path)
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    bad_for = copy.deepcopy(rule)
    bad_for["spec"]["groups"][1]["rules"][0]["for"] = "ten minutes"
    with pytest.raises(AssertionError, match=re.escape("spec.groups[1].rules[0].for")):
        _dry_run(kubectl, [bad_for], tmp_path)


def test_the_scraper_token_reads_the_adapter_metrics_once_bound(
    operator_crds: None, kubectl: Kubectl, metrics_adapter: MetricsAdapter, tmp_path: Path
) -> None:
    docs = render("manifests/monitoring")
    rbac = [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    binding = next(d for d in rbac if d["kind"] == "ClusterRoleBinding")
    (subject,) = binding["subjects"]  # the scraper ServiceAccount
    name, ns = subject["name"], subject["namespace"]
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": ns}}  # fmt: skip
    path = tmp_path / "account.yaml"
    path.write_text(yaml.safe_dump(account))
    kubectl("apply", "-f", str(path))
    # A token of that ServiceAccount (the identity the token controller puts in its Secret).
    token = kubectl("create", "token", name, "-n", ns, "--duration=10m").strip()
    url = f"{metrics_adapter.url}/metrics"
    ca = str(metrics_adapter.pki.ca.cert)
    headers = {"Authorization": f"Bearer {token}"}

    denied = requests.get(url, verify=ca, headers=headers, timeout=10)
    assert denied.status_code == 403, denied.text
    assert denied.json()["kind"] == "Status"

    path.write_text(yaml.safe_dump_all(rbac))
    kubectl("apply", "-f", str(path))
    try:
        allowed = wait_for(
            lambda: (
                r if (r := requests.get(url, verify=ca, headers=headers, timeout=10)).ok else None
            ),
            timeout_s=60,
            what="the scraper token allowed after the ClusterRoleBinding",
        )
        assert "edl_adapter_scrapes_total" in allowed.text
        assert allowed.headers["Content-Type"].startswith("text/plain")
    finally:
        kubectl("delete", "-f", str(path), "--ignore-not-found")


def test_kube_apiserver_exports_the_apiservice_availability_the_alert_reads(
    metrics_adapter: MetricsAdapter, kubectl: Kubectl
) -> None:
    names = {d["metadata"]["name"] for d in render("manifests/base") if d["kind"] == "APIService"}
    text = kubectl("get", "--raw", "/metrics", timeout_s=60)
    found = dict(
        re.findall(r'^aggregator_unavailable_apiservice\{name="([^"]+)"\} (\S+)$', text, re.M)
    )
    assert {n: found.get(n) for n in names} == {n: "0" for n in names}, found
