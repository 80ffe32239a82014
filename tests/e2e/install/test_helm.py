"""The Helm charts on a real control plane (helm built from the Go module proxy).

1. Every values example of charts/edl and charts/edl-trainer, rendered by `helm template`,
   passes a strict server-side dry-run on the session's kube-apiserver, with
   prometheus-operator's and cert-manager's CRDs installed as their Go modules ship them.
   The trainer chart, told to own its namespace (`namespace.create`), installs with
   `--take-ownership` into a namespace `kubectl create` made: the namespace gets its
   PodSecurity labels, the
   kube-apiserver then refuses a privileged pod there, an upgrade changes a level, and the
   uninstall keeps the namespace.
2. On a control plane of its own whose pods run from EDL's images (podman, host network):
   - with another adapter's `v1beta1.external.metrics.k8s.io` in place, `helm install`
     refuses, naming its Service, and creates nothing; `edl-adapter preflight` (the
     kustomize users' check) refuses the same install;
   - `helm install` of both charts, from the `.tgz` files `helm package` makes (as
     `make dist` ships them), with a UID, GID and fsGroup of their own (as OpenShift assigns
     them from a namespace's range, not the images' 65532), pod labels, JSON logs, and for the
     trainer a dataset volume and a memory-backed /dev/shm, ends with the trainer Deployment
     scaled to 2 by its HPA on per-pod throughput (this cluster has no Nodes for the sizer:
     tests/e2e/metrics_adapter/test_sizing.py has them), both pods training in one world and
     running as that UID;
   - `helm uninstall` of both leaves none of their objects behind (Helm keeps the namespaces
     it was told to create; Events expire on their own).
The harness's additions (listen on the pod IP, the Service through the kube-proxy stand-in)
go in through a Helm post-renderer, as a platform team would add their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.helm_install import (
    EXTERNAL,
    Helm,
    helm_install_scales_the_trainer_and_uninstall_leaves_nothing,
    image_sets,
)
from tests.e2e.harness.image_cluster import ADAPTER, ADAPTER_NS, TRAINER_NS, Cluster, image_cluster
from tests.e2e.harness.session import Kubectl
from tests.support.cached_scripts import cached_path
from tests.support.helm import CHARTS, HelmFailed, examples, helm, template
from tests.support.kustomize import ROOT

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


# ---- install, refuse, uninstall on a control plane whose pods run from the images ----------


@pytest.fixture(scope="module")
def cluster(edl_images: dict[str, str]) -> Iterator[Cluster]:
    with image_cluster(edl_images, (ADAPTER_NS, TRAINER_NS)) as c:
        yield c


def test_helm_refuses_to_take_over_another_adapters_apiservice(
    cluster: Cluster, tmp_path: Path
) -> None:
    foreign = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": EXTERNAL},
        "spec": {
            "group": "external.metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100, "insecureSkipTLSVerify": True,
            "service": {"name": "keda-operator-metrics-apiserver", "namespace": "keda"},
        },
    }  # fmt: skip
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(foreign))
    cluster.kubectl("apply", "-f", str(path))
    run = Helm(cluster, tmp_path / "helm")
    try:
        with pytest.raises(HelmFailed) as refused:
            run("install", "edl", str(CHARTS / "edl"), "-n", ADAPTER_NS, "--create-namespace",
                *image_sets(cluster.images["adapter"]))  # fmt: skip
        assert (
            f"APIService {EXTERNAL} is served by Service keda/keda-operator-metrics-apiserver, "
            f"not by this release's {ADAPTER_NS}/{ADAPTER}: refusing to take it over"
        ) in str(refused.value)
        assert run("list", "-A", "-q").strip() == ""
        where = "jsonpath={.spec.service.namespace}/{.spec.service.name}"
        owner = cluster.kubectl("get", "apiservice", EXTERNAL, "-o", where)
        assert owner == "keda/keda-operator-metrics-apiserver"
        assert cluster.kubectl("get", "deployments", "-n", ADAPTER_NS, "-o", "name") == ""

        # The kustomize users' check refuses the same install (the real CLI, the real API).
        rendered = subprocess.run(
            [cluster.kubectl.binary, "kustomize", str(ROOT / "manifests/base")],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        preflight = subprocess.run(
            [str(Path(sys.executable).parent / "edl-adapter"), "preflight", "-f", "-",
             "--kubeconfig", str(cluster.cp.kubeconfig)],
            input=rendered, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert preflight.returncode == 1, preflight
        assert preflight.stdout == "" and "Traceback" not in preflight.stderr, preflight
        assert preflight.stderr.splitlines()[-1] == (
            f"edl-adapter: error: APIService {EXTERNAL} is served by Service "
            "keda/keda-operator-metrics-apiserver; installing would switch it to "
            "edl-system/edl-metrics-adapter; leave that APIService out "
            "(manifests/overlays/custom-only for the external one) or pass --take-over"
        )
    finally:
        cluster.kubectl("delete", "apiservice", EXTERNAL, "--ignore-not-found")


def test_helm_install_scales_the_trainer_and_uninstall_leaves_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    helm_install_scales_the_trainer_and_uninstall_leaves_nothing(cluster, tmp_path)
