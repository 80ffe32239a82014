"""The Helm charts on a real control plane (helm built from the Go module proxy).

1. Every values example of charts/edl and charts/edl-trainer, rendered by `helm template`,
   passes a strict server-side dry-run on the session's kube-apiserver, with
   prometheus-operator's and cert-manager's CRDs installed as their Go modules ship them.
   The trainer chart, told to own its namespace (`namespace.create`), installs with
   `--take-ownership` into a namespace `kubectl create` made: the namespace gets its
   PodSecurity labels, the
   kube-apiserver then refuses a privileged pod there, an upgrade changes a level, and the
   uninstall keeps the namespace.
2. The refusal to take over another server's APIService and the install whose pods run from
   EDL's images are in test_kubelet_helm.py (the kubelet session's control plane and nodes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.session import Kubectl
from tests.support.cached_scripts import cached_path
from tests.support.helm import CHARTS, examples, helm, template

pytestmark = pytest.mark.timeout(900)

CRD_SCRIPTS = {
    "fetch-prometheus-operator-crds.sh": ("podmonitors", "servicemonitors", "prometheusrules"),
    "fetch-cert-manager-crds.sh": ("certificates", "issuers"),
}


def _crds(kubectl: Kubectl) -> None:
    for script, plurals in CRD_SCRIPTS.items():
        for path in sorted(cached_path(script).glob("*.yaml")):
            kubectl("apply", "--server-side", "-f", str(path), timeout_s=60)
        for plural in plurals:
            group = "monitoring.coreos.com" if "prometheus" in script else "cert-manager.io"
            kubectl("wait", "--for=condition=Established", f"crd/{plural}.{group}",
                    "--timeout=60s", timeout_s=70)  # fmt: skip


@pytest.fixture(scope="module")
def crds_and_namespaces(kubectl: Kubectl) -> None:
    _crds(kubectl)
    existing = kubectl("get", "namespaces", "-o", "name").split()
    for ns in ("edl-system", "ml", "monitoring"):  # monitoring: production.yaml's dashboards
        if f"namespace/{ns}" not in existing:
            kubectl("create", "namespace", ns)


CASES = [("edl", p, "edl-system") for p in examples("edl")] + [
    ("edl-trainer", p, "ml") for p in examples("edl-trainer")
]


@pytest.mark.parametrize(
    ("chart", "values", "namespace"), CASES, ids=[f"{c}-{p.stem}" for c, p, _ in CASES]
)
def test_every_values_example_passes_a_strict_server_side_dry_run(
    crds_and_namespaces: None,
    kubectl: Kubectl,
    tmp_path: Path,
    chart: str,
    values: Path,
    namespace: str,
) -> None:
    docs = template(chart, values, namespace=namespace)
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    out = kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(path), timeout_s=90)
    assert out.count("(server dry run)") == len(docs), out


PRIVILEGED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "privileged"},
    "spec": {
        "containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]
    },
}


def test_the_chart_owns_a_created_namespace_and_its_pod_security_is_enforced(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path: Path
) -> None:
    """docs/helm.md's first way: an empty namespace, then --take-ownership, namespace.create."""
    ns = "edl-psa"
    homes = {f"HELM_{k.upper()}_HOME": str(tmp_path / k) for k in ("cache", "config", "data")}
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig), **homes}
    pod = tmp_path / "privileged.json"
    pod.write_text(json.dumps(PRIVILEGED_POD))
    try:
        kubectl("create", "namespace", ns)
        helm("install", "digits", str(CHARTS / "edl-trainer"), "-n", ns, "--take-ownership",
             "--set", "namespace.create=true", env=env)  # fmt: skip
        labels = json.loads(kubectl("get", "namespace", ns, "-o", "json"))["metadata"]["labels"]
        for mode in ("enforce", "audit", "warn"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        with pytest.raises(AssertionError, match=r'violates PodSecurity "restricted:latest"'):
            kubectl("apply", "-n", ns, "-f", str(pod))
        helm("upgrade", "digits", str(CHARTS / "edl-trainer"), "-n", ns, "--set",
             "namespace.create=true", "--set", "namespace.podSecurity.enforce=baseline",
             env=env)  # fmt: skip
        labels = json.loads(kubectl("get", "namespace", ns, "-o", "json"))["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
        helm("uninstall", "digits", "-n", ns, "--wait", env=env)
        kept = json.loads(kubectl("get", "namespace", ns, "-o", "json"))
        assert kept["status"]["phase"] == "Active"  # kept, as --create-namespace's would be
        assert kubectl("get", "deployments,hpa,roles", "-n", ns, "-o", "name") == ""
    finally:
        kubectl("delete", "namespace", ns, "--ignore-not-found", "--timeout=100s", timeout_s=120)
