"""The install as docs/install.md says it, its pods run by real kubelets from EDL's images.

The kubelet session's control plane and its nodes (`kubelet_node_group`: three kubelets +
containerd, each node on a loopback address of its own) run what `kubectl apply -k` of our
kustomizations over `manifests/base` and `manifests/examples/digits-trainer` creates: the
adapter's two replicas from EDL's adapter image behind the aggregation layer, and the digits
trainer from EDL's trainer image, scaled by the HPA on EDL's metrics. The check is the same as
the podman version's (tests/e2e/harness/install_checks.py); here the containers are the
kubelet's (`containerd://` IDs, the OCI spec containerd holds).

What the harness adds on top of the README's kustomization, and why
(tests/e2e/harness/image_cluster.py): `hostNetwork: true` (the nodes have no CNI) with each
process on its pod IP (its node's address); `KUBERNETES_SERVICE_HOST/PORT` = kube-apiserver's
loopback address (no kube-proxy for the `kubernetes` Service's ClusterIP); the adapter's
Service as `type: ExternalName` to the harness's kube-proxy stand-in (loopback pod IPs cannot
be in an EndpointSlice); the HPA on per-pod throughput (`hpa-throughput.yaml`) with at most 2
replicas and a longer run, as in the podman version.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.e2e.harness.image_cluster import Cluster
from tests.e2e.harness.install_checks import (
    ADAPTER_NS,
    TRAINER_NS,
    custom_only_overlay_leaves_external_metrics_to_their_owner,
    manifests_run_and_the_hpa_scales_training,
)
from tests.e2e.harness.kubelet_node import KubeletNodeGroup

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.kubelet]


def test_custom_only_overlay_leaves_external_metrics_to_their_owner(
    kubelet_cluster: Cluster,
) -> None:
    custom_only_overlay_leaves_external_metrics_to_their_owner(kubelet_cluster)


def test_manifests_run_from_the_images_and_the_hpa_scales_training(
    kubelet_cluster: Cluster, kubelet_node_group: KubeletNodeGroup
) -> None:
    facts = manifests_run_and_the_hpa_scales_training(kubelet_cluster)
    assert facts.runtime == "containerd"

    # Every pod is the kubelets': a containerd container from EDL's image on one of the nodes.
    core = client.CoreV1Api(kubelet_cluster.api)
    for ns, key in ((ADAPTER_NS, "adapter"), (TRAINER_NS, "trainer")):
        pods = core.list_namespaced_pod(ns).items
        assert pods, ns
        for pod in pods:
            assert str(pod.spec.node_name) in kubelet_node_group.names, pod.spec.node_name
            (status,) = pod.status.container_statuses or []
            assert status.container_id.startswith("containerd://"), status
            assert status.image == kubelet_cluster.images[key], status
