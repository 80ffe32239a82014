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

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.helm_install import (
    UID,
    helm_install_scales_the_trainer_and_uninstall_leaves_nothing,
)
from tests.e2e.harness.image_cluster import (
    ADAPTER_NS,
    TRAINER_NS,
    Cluster,
    kubelet_image_cluster,
)
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.e2e.harness.podrunner import LoopbackAddressPool

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.kubelet]


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane,
    kubelet_node_group: KubeletNodeGroup,
    loopback_pool: LoopbackAddressPool,
    edl_images: dict[str, str],
) -> Iterator[Cluster]:
    proxy_address = str(loopback_pool.network[1])  # .1: never a node's (the pool starts at .2)
    with kubelet_image_cluster(
        control_plane, kubelet_node_group, proxy_address, edl_images, (ADAPTER_NS, TRAINER_NS)
    ) as c:
        yield c


def test_helm_install_scales_the_trainer_and_uninstall_leaves_nothing(
    cluster: Cluster, kubelet_node_group: KubeletNodeGroup, tmp_path: Path
) -> None:
    core = client.CoreV1Api(cluster.api)
    seen: list[str] = []

    def runs_as_the_values_uid(namespace: str, name: str) -> None:
        pod = core.read_namespaced_pod(name, namespace)
        assert str(pod.spec.node_name) in kubelet_node_group.names, pod.spec.node_name
        facts = cluster.runtime.facts(pod)
        assert (facts.runtime, facts.user, facts.host_network) == ("containerd", str(UID), True)
        seen.append(name)

    helm_install_scales_the_trainer_and_uninstall_leaves_nothing(
        cluster, tmp_path, check_pod=runs_as_the_values_uid
    )
    assert len(seen) >= 3, seen  # two trainers and the adapter's replicas
