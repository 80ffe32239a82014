"""The Helm charts installed from their `.tgz` files, their pods run by real kubelets.

The kubelet session's control plane and its nodes (`kubelet_node_group`) run what `helm
install` of charts/edl and charts/edl-trainer creates, from EDL's images: the adapter behind
the aggregation layer, the trainer scaled to 2 by the chart's HPA on per-pod throughput, both
pods in one world, every container running as the values' UID (not the images' 65532), and
`helm uninstall` of both leaving nothing behind (tests/e2e/harness/helm_install.py, the same
check as the podman version in test_helm.py). The harness's additions (`hostNetwork`, each
process on its pod IP, kube-apiserver's address, the adapter's Service through the kube-proxy
stand-in) go in through a Helm post-renderer, as a platform team would add their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.harness.helm_install import (
    UID,
    helm_install_scales_the_trainer_and_uninstall_leaves_nothing,
)
from tests.e2e.harness.image_cluster import (
    Cluster,
)
from tests.e2e.harness.kubelet_node import KubeletNodeGroup

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.kubelet]


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
