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
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.image_cluster import ADAPTER, ADAPTER_NS, Cluster, image_cluster
from tests.e2e.harness.install import wait_rollout
from tests.e2e.harness.session import Kubectl
from tests.support.cached_scripts import cached_path
from tests.support.helm import CHARTS, HelmFailed, examples, helm, template
from tests.support.kustomize import ROOT
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(900)

TRAINER_NS = "ml"
TRAINER = "digits-trainer"
EXTERNAL = "v1beta1.external.metrics.k8s.io"
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


POST_RENDERER = '''#!{python}
"""The harness's additions to what Helm renders (see tests/e2e/harness/image_cluster.py)."""
import sys
import yaml

docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
for d in docs:
    if d["kind"] == "Deployment" and d["metadata"]["name"] == "{adapter}":
        env = d["spec"]["template"]["spec"]["containers"][0].setdefault("env", [])
        env += [
            {{"name": "POD_IP", "valueFrom": {{"fieldRef": {{"fieldPath": "status.podIP"}}}}}},
            {{"name": "EDL_ADAPTER_HOST", "value": "$(POD_IP)"}},
        ]
    if d["kind"] == "Service" and d["metadata"]["name"] == "{adapter}":
        d["spec"]["type"] = "ExternalName"
        d["spec"]["externalName"] = "{proxy}"
sys.stdout.write(yaml.safe_dump_all(docs))
'''


class Helm:
    """helm against one control plane's kubeconfig."""

    def __init__(self, cluster: Cluster, work: Path) -> None:
        homes = {f"HELM_{k.upper()}_HOME": str(work / k) for k in ("cache", "config", "data")}
        self.env = {**os.environ, "KUBECONFIG": str(cluster.cp.kubeconfig), **homes}
        self.post_renderer = work / "post-render.py"
        work.mkdir(parents=True, exist_ok=True)
        self.post_renderer.write_text(
            POST_RENDERER.format(
                python=sys.executable, adapter=ADAPTER, proxy=cluster.proxy_address
            )
        )
        self.post_renderer.chmod(0o755)

    def __call__(self, *args: str, timeout_s: float = 300) -> str:
        return helm(*args, env=self.env, timeout_s=timeout_s)


def _image_sets(ref: str) -> list[str]:
    name, _, tag = ref.rpartition(":")
    return ["--set", f"image.repository={name}", "--set", f"image.tag={tag}"]


def _ours(cluster: Cluster) -> set[str]:
    """Every object of the two releases' kinds that is not there on a fresh cluster."""
    out = cluster.kubectl(
        "get",
        "apiservices,clusterroles,clusterrolebindings,validatingadmissionpolicies,"
        "validatingadmissionpolicybindings",
        "-l", "app.kubernetes.io/part-of=edl", "-o", "name",
    )  # fmt: skip
    for ns in (ADAPTER_NS, TRAINER_NS, "kube-system"):
        out += cluster.kubectl(
            "get",
            "deployments,replicasets,pods,services,serviceaccounts,secrets,configmaps,roles,"
            "rolebindings,poddisruptionbudgets,horizontalpodautoscalers,leases",
            "-n", ns, "-o", "name", "--ignore-not-found",
        )  # fmt: skip
    fresh = {"configmap/kube-root-ca.crt", "serviceaccount/default"}
    return {line for line in out.split() if line not in fresh}


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
                *_image_sets(cluster.images["adapter"]))  # fmt: skip
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


# Not the images' 65532: a UID from the range OpenShift gives a namespace.
UID = 1000650000
POD_SECURITY = {
    "runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip


def _packaged(run: Helm, into: Path) -> dict[str, Path]:
    """Both charts as `helm package` makes them (scripts/build-dist.sh ships these)."""
    into.mkdir(parents=True, exist_ok=True)
    run("package", str(CHARTS / "edl"), str(CHARTS / "edl-trainer"), "--destination", str(into))
    return {path.name.rsplit("-", 1)[0]: path for path in into.glob("*.tgz")}


def _pods(cluster: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
    pods: list[dict[str, Any]] = json.loads(out)["items"]
    return pods


def test_helm_install_scales_the_trainer_and_uninstall_leaves_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    before = _ours(cluster)
    run = Helm(cluster, tmp_path / "helm")
    charts = _packaged(run, tmp_path / "dist")
    assert sorted(charts) == ["edl", "edl-trainer"], charts
    post = ["--post-renderer", str(run.post_renderer)]
    adapter_values = tmp_path / "adapter.yaml"
    adapter_values.write_text(yaml.safe_dump({
        "podSecurityContext": POD_SECURITY, "podLabels": {"team": "ml-platform"},
        "logFormat": "json",
    }))  # fmt: skip
    run("install", "edl", str(charts["edl"]), "-n", ADAPTER_NS, "--create-namespace",
        "-f", str(adapter_values), *_image_sets(cluster.images["adapter"]), *post,
        "--wait", "--timeout", "5m")  # fmt: skip
    wait_for(
        lambda: all(cluster.available(n) for n in (
            "v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io", EXTERNAL)),
        timeout_s=180,
        what="the chart's three APIServices Available (its generated CA in their caBundle)",
        describe=lambda: cluster.kubectl("get", "apiservices"),
    )  # fmt: skip
    trainer_values = tmp_path / "trainer.yaml"
    trainer_values.write_text(yaml.safe_dump({
        "command": ["python", "-m", "examples.train_digits_elastic", "--epochs", "400",
                    "--step-sleep", "0.05"],
        "extraEnv": [{"name": "EDL_AGENT_HOST", "value": "$(POD_IP)"}],
        "workers": {"min": 1, "max": 2, "initial": 1},
        "autoscaling": {"mode": "throughput", "throughputTarget": "400"},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "podSecurityContext": POD_SECURITY, "podLabels": {"team": "vision"},
        "logFormat": "json",
        "dataset": {"enabled": True, "mountPath": "/data", "volume": {"emptyDir": {}}},
        "shm": {"enabled": True, "sizeLimit": "256Mi"},
    }))  # fmt: skip
    run("install", "digits", str(charts["edl-trainer"]), "-n", TRAINER_NS, "--create-namespace",
        "-f", str(trainer_values), *_image_sets(cluster.images["trainer"]))  # fmt: skip
    wait_rollout(cluster.api, TRAINER_NS, TRAINER, timeout_s=300)
    apps = client.AppsV1Api(cluster.api)
    wait_for(
        lambda: apps.read_namespaced_deployment(TRAINER, TRAINER_NS).spec.replicas == 2,
        timeout_s=300,
        what="the chart's HPA scaling the trainer to 2",
        describe=lambda: cluster.kubectl("describe", "hpa", TRAINER, "-n", TRAINER_NS),
    )
    wait_rollout(cluster.api, TRAINER_NS, TRAINER, timeout_s=300)

    def world_of_two() -> bool:
        raw = cluster.kubectl("get", "configmap", "edl-digits-world", "-n", TRAINER_NS,
                              "-o", "jsonpath={.data.world}")  # fmt: skip
        return bool(raw) and len(json.loads(raw).get("members") or []) == 2

    wait_for(world_of_two, timeout_s=300, what="both trainer pods in a world of 2",
             describe=lambda: cluster.kubectl("get", "pods", "-n", TRAINER_NS))  # fmt: skip
    # What a platform engineer checks with `kubectl get pod -o yaml`: the values reached the
    # running pods (the harness runs each container as its securityContext's user).
    trainers = _pods(cluster, TRAINER_NS, "app.kubernetes.io/instance=digits,team=vision")
    adapters = _pods(cluster, ADAPTER_NS, "app.kubernetes.io/instance=edl,team=ml-platform")
    running = [pod for pod in trainers if pod["status"]["phase"] == "Running"]
    assert adapters and len(running) == 2, [pod["metadata"]["name"] for pod in trainers]
    for pod in trainers + adapters:
        assert pod["spec"]["securityContext"]["runAsUser"] == UID, pod["metadata"]["name"]
    for pod in trainers:
        mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert {"/data", "/dev/shm"} <= mounts, mounts
    assert _ours(cluster) - before  # the releases' objects are there

    run("uninstall", "digits", "-n", TRAINER_NS, "--wait", "--timeout", "3m")
    run("uninstall", "edl", "-n", ADAPTER_NS, "--wait", "--timeout", "3m")
    wait_for(
        lambda: _ours(cluster) == before,
        timeout_s=180,
        what="nothing of the two releases left",
        describe=lambda: "\n".join(sorted(_ours(cluster) - before)),
    )
    assert run("list", "-A", "-q").strip() == ""
