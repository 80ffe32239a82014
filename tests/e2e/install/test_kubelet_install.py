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
replicas and a longer run.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.e2e.harness.image_cluster import ADAPTER, ADAPTER_NS, TRAINER, TRAINER_NS, Cluster
from tests.e2e.harness.install import PodStartFailed, pod_errors, wait_rollout
from tests.e2e.harness.install_checks import (
    CUSTOM,
    custom_only_overlay_leaves_external_metrics_to_their_owner,
    manifests_run_and_the_hpa_scales_training,
)
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.kubelet]

WRONG_NS = "ml-wrong-image"
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff")


def test_custom_only_overlay_leaves_external_metrics_to_their_owner(
    kubelet_cluster: Cluster,
) -> None:
    custom_only_overlay_leaves_external_metrics_to_their_owner(kubelet_cluster)


def test_a_wrong_image_name_shows_the_pods_error(
    kubelet_cluster: Cluster, kubelet_node_group: KubeletNodeGroup
) -> None:
    """Runs while the custom-only test's adapter serves: the wrong trainer breaks nothing else."""
    cluster = kubelet_cluster
    missing = cluster.images["trainer"].replace("edl-trainer", "edl-trainer-typo")
    overlay = cluster.trainer_overlay("wrong-image", missing, namespace=WRONG_NS)
    core = client.CoreV1Api(cluster.api)
    cluster.kubectl("apply", "-k", str(overlay), timeout_s=60)
    try:
        with pytest.raises(PodStartFailed) as failed:
            wait_rollout(cluster.api, WRONG_NS, TRAINER, timeout_s=180)
        assert any(r in str(failed.value) for r in PULL_ERRORS), failed.value
        assert missing in str(failed.value), failed.value

        # What `kubectl get pods` and `kubectl describe pod` show: the kubelet backs off.
        wait_for(
            lambda: "ImagePullBackOff" in cluster.kubectl("get", "pods", "-n", WRONG_NS),
            timeout_s=120,
            what="the wrong image's pod in ImagePullBackOff",
            describe=lambda: cluster.kubectl("describe", "pods", "-n", WRONG_NS),
        )
        described = cluster.kubectl("describe", "pods", "-n", WRONG_NS)
        print(described)
        assert f'Failed to pull image "{missing}"' in described, described
        assert "Back-off pulling image" in described, described
        (pod,) = core.list_namespaced_pod(WRONG_NS, label_selector="app=trainer").items
        assert str(pod.spec.node_name) in kubelet_node_group.names, pod.spec.node_name
        (status,) = pod.status.container_statuses or []
        assert status.image == missing and not status.container_id, status  # nothing started
        assert pod_errors(core, WRONG_NS, "app=trainer")

        # Nothing else breaks: the adapter stays rolled out and serving, every node Ready.
        wait_rollout(cluster.api, ADAPTER_NS, ADAPTER, timeout_s=60)
        assert all(cluster.available(n) for n in CUSTOM), cluster.kubectl("get", "apiservices")
        nodes = client.CoreV1Api(cluster.api).list_node().items
        ready = {
            n.metadata.name
            for n in nodes
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        }
        assert set(kubelet_node_group.names) <= ready, ready
    finally:  # its pod holds a node's port 9400 (host network) until it is gone
        cluster.kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--timeout=120s",
                        timeout_s=140)  # fmt: skip


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
