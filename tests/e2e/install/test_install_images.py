"""The install as docs/install.md says it, run from EDL's own images on a real control plane.

`make images` builds the adapter and trainer images (podman); kustomizations of our own over
`manifests/base`, `manifests/overlays/custom-only` and `manifests/examples/digits-trainer` set
the image names through kustomize `images:` and are applied with `kubectl apply -k`. The pod
runner runs every pod from its image (podman + runc, host network): the manifests' commands,
env, probes, non-root user, read-only root, volumes and ServiceAccount tokens are what runs.
This module has a control plane of its own: one APIService has one server, and the session
control plane's belongs to the harness's adapter process.

What the harness adds on top of the README's kustomization, and why: all pods share the host's
network namespace here, so each process is told to listen on its own pod IP (EDL_ADAPTER_HOST,
EDL_AGENT_HOST); the adapter's Service becomes `type: ExternalName` pointing at the harness's
kube-proxy stand-in (harness/serviceproxy.py: pod IPs are loopback addresses, which an
EndpointSlice may not hold), keeping its selector and ports; on 2 shared cores the HPA may grow
the job to 2 pods (not 8) and the job runs longer (more epochs, a short simulated step) so it
is still training when the HPA acts. The example's HPA sizes by the sizer's
`desired_replicas`, which needs Nodes and a scheduler; this module's cluster has neither
(tests/e2e/metrics_adapter/test_sizing.py has both), so the overlay puts in the per-pod throughput
rules of
the example's alternative, `hpa-throughput.yaml`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.e2e.harness.image_cluster import Cluster, image_cluster
from tests.e2e.harness.install import PodStartFailed, pod_errors, wait_rollout
from tests.e2e.harness.install_checks import (
    custom_only_overlay_leaves_external_metrics_to_their_owner,
    manifests_run_and_the_hpa_scales_training,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

ADAPTER_NS = "edl-system"
TRAINER_NS = "ml"  # the example kustomization's namespace
WRONG_NS = "ml-wrong-image"
ADAPTER = "edl-metrics-adapter"
TRAINER = "digits-trainer"
CUSTOM = ("v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io")
EXTERNAL = "v1beta1.external.metrics.k8s.io"


@pytest.fixture(scope="module")
def cluster(edl_images: dict[str, str]) -> Iterator[Cluster]:
    with image_cluster(edl_images, (ADAPTER_NS, TRAINER_NS, WRONG_NS)) as c:
        yield c


def test_custom_only_overlay_leaves_external_metrics_to_their_owner(cluster: Cluster) -> None:
    custom_only_overlay_leaves_external_metrics_to_their_owner(cluster)


def test_manifests_run_from_the_images_and_the_hpa_scales_training(cluster: Cluster) -> None:
    facts = manifests_run_and_the_hpa_scales_training(cluster)
    assert facts.runtime == "podman"


def test_a_wrong_image_name_shows_the_pods_error(cluster: Cluster) -> None:
    missing = cluster.images["trainer"].replace("edl-trainer", "edl-trainer-typo")
    overlay = cluster.trainer_overlay("wrong-image", missing, namespace=WRONG_NS)
    cluster.kubectl("apply", "-k", str(overlay), timeout_s=60)
    with pytest.raises(PodStartFailed) as failed:
        wait_rollout(cluster.api, WRONG_NS, TRAINER, timeout_s=120)
    assert "ErrImagePull" in str(failed.value) and missing in str(failed.value)
    pods = cluster.kubectl("get", "pods", "-n", WRONG_NS)
    assert "ErrImagePull" in pods, pods
    core = client.CoreV1Api(cluster.api)
    assert pod_errors(core, WRONG_NS, "app=trainer")
    cluster.kubectl("delete", "-k", str(overlay), "--wait=false", timeout_s=60)
