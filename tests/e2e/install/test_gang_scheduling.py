"""Gang admission of charts/edl-trainer (`gang.enabled`) on a real 1.35 kube-scheduler.

On a control plane of its own with Kubernetes 1.35's alpha Workload API on (feature gates
GenericWorkload and GangScheduling on kube-apiserver, kube-controller-manager and
kube-scheduler; `--runtime-config=scheduling.k8s.io/v1alpha1=true`), `helm install` of the
trainer chart with `gang.enabled` and `workers.min=3` (1 CPU per worker):

1. with one 2-CPU node, the Workload `digits-trainer-min3` (gang minCount 3) is there and no
   pod is bound: two are nominated to the node (they would fit) and held, the third is
   Unschedulable; without the gang the two that fit are bound (the second test, the control);
2. a second node joins: all three are bound and run;
3. `helm upgrade` to `workers.min=2` fails as docs/sizing.md says (helm 3.22's compiled-in
   PodSpec has no `workloadRef`), and `helm upgrade --force`, the workaround documented there,
   replaces the Workload with `digits-trainer-min2` and the pods with two of that gang; a
   third worker beyond that minimum is then bound on its own.

The stand-in kubelet (harness/podrunner.py) runs a sleep in place of `edl-agent` (a Helm
post-renderer swaps the command): what a container runs plays no part in admission, and the
agent would need credentials this test is not about.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config

from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.nodes import NodeSpec
from tests.e2e.harness.podrunner import LoopbackAddressPool, PodRunner, PodRunnerSettings
from tests.e2e.harness.session import LOG_SOURCES, Kubectl, work_root
from tests.support.helm import CHARTS, HelmFailed, helm
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

GATES = {"GenericWorkload": True, "GangScheduling": True}
NS = "ml"
DEPLOYMENT = "digits-trainer"
SELECTOR = "app.kubernetes.io/instance=digits"
WORKLOADS = f"/apis/scheduling.k8s.io/v1alpha1/namespaces/{NS}/workloads"
HELD_S = 10.0
"""How long the held pods are watched for a binding after the scheduler showed it has placed
them (nominated) and refused the third. A slower machine only makes the watch weaker."""
Pod = dict[str, Any]
VALUES = {
    "workers": {"min": 3, "max": 3, "initial": 3},
    "autoscaling": {"mode": "none"},  # no adapter here: the replicas are workers.initial
    "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
}
POST_RENDERER = '''#!{python}
"""A sleep in place of edl-agent, for the e2e stand-in kubelet (test_gang_scheduling.py)."""
import sys
import yaml

docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
for d in docs:
    if d["kind"] == "Deployment":
        container = d["spec"]["template"]["spec"]["containers"][0]
        container["command"] = ["python", "-c", "import time; time.sleep(3600)"]
sys.stdout.write(yaml.safe_dump_all(docs))
'''


@dataclass
class GangCluster:
    """The gated control plane, kubectl and helm on it, and a stand-in kubelet per node."""

    cp: ControlPlane
    kubectl: Kubectl
    helm_env: dict[str, str]
    post_renderer: Path
    addresses: LoopbackAddressPool
    runners: list[PodRunner]

    def helm(self, *args: str) -> str:
        return helm(*args, env=self.helm_env, timeout_s=180)

    def join(self, node: NodeSpec) -> None:
        """Registers `node` and starts its kubelet: it runs the pods bound to it."""
        runner = PodRunner(
            config.new_client_from_config(config_file=str(self.cp.kubeconfig)),
            PodRunnerSettings(
                namespace=NS,
                log_dir=self.cp.log_dir / "pods",
                base_env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
                nodes=(node,),
            ),
            self.addresses,
        )
        self.runners.append(runner)
        LOG_SOURCES.append(runner)
        runner.start()

    def leave_all(self) -> None:
        """Stops every kubelet and removes its node."""
        while self.runners:
            runner = self.runners.pop()
            runner.stop()
            LOG_SOURCES.remove(runner)

    def pods(self) -> list[Pod]:
        """The release's pods as the API serves them (the kubernetes client's model has no
        `workloadRef`)."""
        url = f"/api/v1/namespaces/{NS}/pods?labelSelector={SELECTOR}"
        items: list[Pod] = self.cp.request("GET", url).json()["items"]
        return items

    def describe(self) -> str:
        return self.kubectl("get", "pods,workloads", "-n", NS, "-o", "wide")


@pytest.fixture(scope="module")
def gang_cluster() -> Iterator[GangCluster]:
    work = work_root()
    cp = ControlPlane(
        ControlPlaneSettings(
            bin_dir=ensure_binaries(),
            work_dir=work,
            extra_feature_gates=GATES,
            runtime_config=("scheduling.k8s.io/v1alpha1=true",),
        )
    )
    LOG_SOURCES.append(cp)
    try:
        cp.start()
        cp.start_scheduler()
        homes = {
            f"HELM_{k.upper()}_HOME": str(work / "helm" / k) for k in ("cache", "config", "data")
        }
        post = work / "post-render.py"
        post.write_text(POST_RENDERER.format(python=sys.executable))
        post.chmod(0o755)
        kubectl = Kubectl(shutil.which("kubectl") or "/usr/bin/kubectl", cp.kubeconfig)
        yield GangCluster(
            cp=cp,
            kubectl=kubectl,
            helm_env={**os.environ, "KUBECONFIG": str(cp.kubeconfig), **homes},
            post_renderer=post,
            addresses=LoopbackAddressPool(),
            runners=[],
        )
    finally:
        cp.stop()
        LOG_SOURCES.remove(cp)


@pytest.fixture
def cluster(gang_cluster: GangCluster) -> Iterator[GangCluster]:
    """The namespace `ml` made afresh; after the test it is gone, then its nodes (their
    kubelets confirm the deletion of the pods bound to them)."""
    c = gang_cluster
    c.kubectl("create", "namespace", NS)
    try:
        yield c
    finally:
        try:
            c.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
            wait_for(
                lambda: f"namespace/{NS}" not in c.kubectl("get", "namespaces", "-o", "name"),
                timeout_s=120,
                what=f"namespace {NS} gone",
                describe=c.describe,
            )
        finally:
            c.leave_all()


def _install(c: GangCluster, tmp_path: Path, *extra: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    c.helm("install", "digits", str(CHARTS / "edl-trainer"), "-n", NS, "-f", str(values),
           "--post-renderer", str(c.post_renderer), *extra)  # fmt: skip


def _unschedulable(pod: Pod) -> bool:
    return any(
        cond["type"] == "PodScheduled"
        and cond["status"] == "False"
        and cond.get("reason") == "Unschedulable"
        for cond in pod["status"].get("conditions", [])
    )


def _node(pod: Pod) -> str | None:
    name: str | None = pod["spec"].get("nodeName")
    return name


def _workload(pod: Pod) -> str | None:
    name: str | None = pod["spec"].get("workloadRef", {}).get("name")
    return name


def _held_and_refused(c: GangCluster, fit: int, count: int) -> list[Pod]:
    """Waits until `fit` pods are nominated to a node and the rest are Unschedulable."""

    def seen() -> list[Pod] | None:
        pods = c.pods()
        nominated = [p for p in pods if p["status"].get("nominatedNodeName")]
        refused = [p for p in pods if _unschedulable(p)]
        ok = len(pods) == count and len(nominated) == fit and len(refused) == count - fit
        return pods if ok else None

    return wait_for(
        seen, timeout_s=120, what=f"{fit} of {count} pods nominated, the rest Unschedulable",
        describe=c.describe,
    )  # fmt: skip


def _all_bound_and_running(c: GangCluster, count: int, workload: str) -> list[Pod]:
    """Waits until the release has `count` pods, all of `workload`'s gang, each bound and
    Running, and no other (the old pods of an upgrade go in steps, some still Running)."""

    def seen() -> list[Pod] | None:
        pods = c.pods()
        done = [
            p
            for p in pods
            if _node(p)
            and p["status"].get("phase") == "Running"
            and _workload(p) == workload
            and "deletionTimestamp" not in p["metadata"]
        ]
        return pods if len(pods) == len(done) == count else None

    return wait_for(seen, timeout_s=180, describe=c.describe,
                    what=f"{count} pods of {workload} bound and Running, no other")  # fmt: skip


def test_no_worker_is_bound_until_min_fit_then_all_are(
    cluster: GangCluster, tmp_path: Path
) -> None:
    c = cluster
    c.join(NodeSpec("gang-small", cpu="2", memory="8Gi"))
    _install(c, tmp_path, "--set", "gang.enabled=true")

    workload = c.cp.request("GET", f"{WORKLOADS}/digits-trainer-min3").json()
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "apps", "kind": "Deployment", "name": DEPLOYMENT},
        "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 3}}}],
    }
    pods = _held_and_refused(c, fit=2, count=3)
    assert {p["status"].get("nominatedNodeName") for p in pods} == {"gang-small", None}
    assert [_workload(p) for p in pods] == ["digits-trainer-min3"] * 3
    deadline = time.monotonic() + HELD_S
    while time.monotonic() < deadline:  # held: the two that fit are not bound without the third
        pods = c.pods()
        bound = {p["metadata"]["name"]: _node(p) for p in pods if _node(p)}
        assert bound == {}, bound
        assert all(p["status"].get("phase") == "Pending" for p in pods)
        time.sleep(0.5)

    c.join(NodeSpec("gang-spare", cpu="2", memory="8Gi"))
    pods = _all_bound_and_running(c, 3, "digits-trainer-min3")
    per_node = Counter(_node(p) for p in pods)
    assert set(per_node) == {"gang-small", "gang-spare"}, per_node
    assert max(per_node.values()) <= 2, per_node  # 2 CPUs a node

    # A new min is a new Workload (its spec is immutable), so the pods' workloadRef changes.
    values = tmp_path / "values.yaml"
    upgrade = ["upgrade", "digits", str(CHARTS / "edl-trainer"), "-n", NS, "-f", str(values),
               "--set", "gang.enabled=true", "--set", "workers.min=2", "--set",
               "workers.initial=2", "--post-renderer", str(c.post_renderer)]  # fmt: skip
    with pytest.raises(HelmFailed) as refused:
        c.helm(*upgrade)
    assert 'unable to find api field in struct PodSpec for the json field "workloadRef"' in str(
        refused.value
    )
    c.helm(*upgrade, "--force")
    names = {w["metadata"]["name"] for w in c.cp.request("GET", WORKLOADS).json()["items"]}
    assert names == {"digits-trainer-min2"}
    deployment = c.cp.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/{DEPLOYMENT}")
    spec = deployment.json()["spec"]
    assert spec["strategy"] == {"type": "Recreate"}
    assert spec["template"]["spec"]["workloadRef"] == {
        "name": "digits-trainer-min2", "podGroup": "workers"}  # fmt: skip
    _all_bound_and_running(c, 2, "digits-trainer-min2")
    # Beyond the minimum a worker is bound on its own: growth is not held for a gang.
    c.kubectl("scale", "deployment", DEPLOYMENT, "-n", NS, "--replicas=3")
    _all_bound_and_running(c, 3, "digits-trainer-min2")


def test_without_the_gang_the_pods_that_fit_are_bound_at_once(
    cluster: GangCluster, tmp_path: Path
) -> None:
    """The control: the same release, node and scheduler with the gang off: the two pods that
    fit are bound and run, the third is Unschedulable (what the first test's watch would see
    were the gang not holding them)."""
    c = cluster
    c.join(NodeSpec("gang-small", cpu="2", memory="8Gi"))
    _install(c, tmp_path)

    def two_run_one_refused() -> list[Pod] | None:
        pods = c.pods()
        run = [p for p in pods if _node(p) == "gang-small" and p["status"]["phase"] == "Running"]
        refused = [p for p in pods if _unschedulable(p) and not _node(p)]
        return pods if len(pods) == 3 and len(run) == 2 and len(refused) == 1 else None

    wait_for(two_run_one_refused, timeout_s=120, describe=c.describe,
             what="2 of 3 pods bound and Running, 1 Unschedulable, without the gang")  # fmt: skip
    assert not c.cp.request("GET", WORKLOADS).json()["items"]
