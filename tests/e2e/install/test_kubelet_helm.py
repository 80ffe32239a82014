"""The Helm charts installed from their `.tgz` files, their pods run by real kubelets.

With another adapter's `v1beta1.external.metrics.k8s.io` in place, `helm install` of
charts/edl refuses, naming that APIService's Service, and creates nothing; `edl-adapter
preflight` (the kustomize users' check) refuses the same install.

The kubelet session's control plane and its nodes (`kubelet_node_group`) run what `helm
install` of charts/edl and charts/edl-trainer creates, from EDL's images: the adapter behind
the aggregation layer, the trainer scaled to 2 by the chart's HPA on per-pod throughput, both
pods in one world, every container running as the values' UID (not the images' 65532), and
`helm uninstall` of both leaving nothing behind (tests/e2e/harness/helm_install.py;
test_helm.py has the charts' server-side dry-runs and PodSecurity). The harness's additions
(`hostNetwork`, each process on its pod IP, kube-apiserver's address, the adapter's Service
through the kube-proxy stand-in) go in through a Helm post-renderer, as a platform team
would add their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.harness.helm_install import (
    EXTERNAL,
    UID,
    Helm,
    helm_install_scales_the_trainer_and_uninstall_leaves_nothing,
    image_sets,
)
from tests.e2e.harness.image_cluster import ADAPTER, ADAPTER_NS, Cluster
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.support.helm import CHARTS, HelmFailed
from tests.support.kustomize import ROOT

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.kubelet]


def test_helm_refuses_to_take_over_another_adapters_apiservice(
    kubelet_cluster: Cluster, tmp_path: Path
) -> None:
    """No pod of EDL runs here: the control plane refuses before anything is created."""
    cluster = kubelet_cluster
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
    kubelet_cluster: Cluster, kubelet_node_group: KubeletNodeGroup, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kubelet_cluster.api)
    seen: list[str] = []

    def runs_as_the_values_uid(namespace: str, name: str) -> None:
        pod = core.read_namespaced_pod(name, namespace)
        assert str(pod.spec.node_name) in kubelet_node_group.names, pod.spec.node_name
        facts = kubelet_cluster.runtime.facts(pod)
        assert (facts.runtime, facts.user, facts.host_network) == ("containerd", str(UID), True)
        seen.append(name)

    helm_install_scales_the_trainer_and_uninstall_leaves_nothing(
        kubelet_cluster, tmp_path, check_pod=runs_as_the_values_uid
    )
    assert len(seen) >= 3, seen  # two trainers and the adapter's replicas
