"""`helm install` of both charts from the `.tgz` files `helm package` makes, on an image
cluster (harness/image_cluster.py: the kubelet's nodes); what the Helm install test checks.

The harness's additions (`hostNetwork`, listen on the pod IP, kube-apiserver's address, the
Service through the kube-proxy stand-in) go in through a Helm post-renderer, as a platform
team would add their own.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness.image_cluster import (
    ADAPTER,
    ADAPTER_NS,
    TRAINER,
    TRAINER_NS,
    Cluster,
    wait_hpa_scales_the_trainer_to_two,
)
from tests.e2e.harness.install import wait_rollout
from tests.support.helm import CHARTS, helm
from tests.support.waiting import wait_for

EXTERNAL = "v1beta1.external.metrics.k8s.io"

POST_RENDERER = '''#!{python}
"""The harness's additions to what Helm renders (see tests/e2e/harness/image_cluster.py)."""
import json
import sys
import yaml

EXTRA_ENV = json.loads({extra_env!r})
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
for d in docs:
    if d["kind"] == "Deployment":
        spec = d["spec"]["template"]["spec"]
        spec["hostNetwork"] = True
        spec["containers"][0].setdefault("env", []).extend(EXTRA_ENV)
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
                python=sys.executable,
                adapter=ADAPTER,
                proxy=cluster.proxy_address,
                extra_env=json.dumps(list(cluster.extra_env)),
            )
        )
        self.post_renderer.chmod(0o755)

    def __call__(self, *args: str, timeout_s: float = 300) -> str:
        return helm(*args, env=self.env, timeout_s=timeout_s)


def image_sets(ref: str) -> list[str]:
    name, _, tag = ref.rpartition(":")
    return ["--set", f"image.repository={name}", "--set", f"image.tag={tag}"]


def ours(cluster: Cluster) -> set[str]:
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


# Not the images' 65532: a UID from the range OpenShift gives a namespace.
UID = 1000650000
POD_SECURITY = {
    "runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip


def packaged(run: Helm, into: Path) -> dict[str, Path]:
    """Both charts as `helm package` makes them (scripts/build-dist.sh ships these)."""
    into.mkdir(parents=True, exist_ok=True)
    run("package", str(CHARTS / "edl"), str(CHARTS / "edl-trainer"), "--destination", str(into))
    return {path.name.rsplit("-", 1)[0]: path for path in into.glob("*.tgz")}


def pods(cluster: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
    found: list[dict[str, Any]] = json.loads(out)["items"]
    return found


PodCheck = Callable[[str, str], None]
"""Called with (namespace, pod name) for each running release pod, before the uninstall."""


def helm_install_scales_the_trainer_and_uninstall_leaves_nothing(
    cluster: Cluster, work: Path, check_pod: PodCheck | None = None
) -> None:
    """Both charts installed with a UID of their own, pod labels, JSON logs, a dataset volume
    and a memory-backed /dev/shm; the trainer's HPA scales it to 2, both pods train in one
    world with the values in their specs; `helm uninstall` of both leaves nothing behind."""
    before = ours(cluster)
    run = Helm(cluster, work / "helm")
    charts = packaged(run, work / "dist")
    assert sorted(charts) == ["edl", "edl-trainer"], charts
    post = ["--post-renderer", str(run.post_renderer)]
    adapter_values = work / "adapter.yaml"
    adapter_values.write_text(yaml.safe_dump({
        "podSecurityContext": POD_SECURITY, "podLabels": {"team": "ml-platform"},
        "logFormat": "json",
    }))  # fmt: skip
    run("install", "edl", str(charts["edl"]), "-n", ADAPTER_NS, "--create-namespace",
        "-f", str(adapter_values), *image_sets(cluster.images["adapter"]), *post,
        "--wait", "--timeout", "5m")  # fmt: skip
    wait_for(
        lambda: all(cluster.available(n) for n in (
            "v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io", EXTERNAL)),
        timeout_s=180,
        what="the chart's three APIServices Available (its generated CA in their caBundle)",
        describe=lambda: cluster.kubectl("get", "apiservices"),
    )  # fmt: skip
    trainer_values = work / "trainer.yaml"
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
        "-f", str(trainer_values), *image_sets(cluster.images["trainer"]), *post)  # fmt: skip
    wait_rollout(cluster.api, TRAINER_NS, TRAINER, timeout_s=300)
    wait_hpa_scales_the_trainer_to_two(cluster, "the chart's")

    def world_of_two() -> bool:
        raw = cluster.kubectl("get", "configmap", "edl-digits-world", "-n", TRAINER_NS,
                              "-o", "jsonpath={.data.world}")  # fmt: skip
        return bool(raw) and len(json.loads(raw).get("members") or []) == 2

    wait_for(world_of_two, timeout_s=300, what="both trainer pods in a world of 2",
             describe=lambda: cluster.kubectl("get", "pods", "-n", TRAINER_NS))  # fmt: skip
    # What a platform engineer checks with `kubectl get pod -o yaml`: the values reached the
    # running pods.
    trainers = pods(cluster, TRAINER_NS, "app.kubernetes.io/instance=digits,team=vision")
    adapters = pods(cluster, ADAPTER_NS, "app.kubernetes.io/instance=edl,team=ml-platform")
    running = [pod for pod in trainers if pod["status"]["phase"] == "Running"]
    assert adapters and len(running) == 2, [pod["metadata"]["name"] for pod in trainers]
    for pod in trainers + adapters:
        assert pod["spec"]["securityContext"]["runAsUser"] == UID, pod["metadata"]["name"]
    for pod in trainers:
        mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert {"/data", "/dev/shm"} <= mounts, mounts
    if check_pod is not None:
        for pod in running + adapters:
            check_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
    assert ours(cluster) - before  # the releases' objects are there

    run("uninstall", "digits", "-n", TRAINER_NS, "--wait", "--timeout", "3m")
    run("uninstall", "edl", "-n", ADAPTER_NS, "--wait", "--timeout", "3m")
    wait_for(
        lambda: ours(cluster) == before,
        timeout_s=180,
        what="nothing of the two releases left",
        describe=lambda: "\n".join(sorted(ours(cluster) - before)),
    )
    assert run("list", "-A", "-q").strip() == ""
