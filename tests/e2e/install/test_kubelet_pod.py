"""EDL's adapter image run by a real kubelet + containerd, checked as a user would.

The image built by `make images` is imported into the node's containerd (`podman save | ctr
images import`); a Deployment of one pod (host network: the node has no CNI) runs `edl-adapter
serve` on a free loopback port, reading its pod list from a ConfigMap volume and writing its
self-signed certificate into an emptyDir. The kubelet runs it as the image's non-root user,
marks it Ready only once its HTTPS readiness probe answers, and `kubectl logs` reads its log
through kube-apiserver from the kubelet. The other e2e tests still run pods with the pod
runner (docs/development.md, "The e2e node").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.install import wait_rollout
from tests.e2e.harness.kubelet_node import KubeletNode
from tests.e2e.harness.processes import free_port
from tests.e2e.harness.session import Kubectl

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.kubelet]

NAME = "edl-metrics-adapter"


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    name = f"kubelet-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(as_body({"metadata": {"name": name}}))
    yield name
    core.delete_namespace(name, grace_period_seconds=0)


def _deployment(image: str, port: int, node: str) -> dict[str, object]:
    labels = {"app.kubernetes.io/name": NAME}
    probe = {"host": "127.0.0.1", "port": port, "scheme": "HTTPS"}
    container = {
        "name": "adapter",
        "image": image,
        "imagePullPolicy": "Never",  # from the local build: containerd has it, no registry
        "args": [
            "serve",
            "--host=127.0.0.1",
            f"--port={port}",
            "--source=static",
            "--static-file=/etc/edl-adapter/pods.yaml",
            "--cert-dir=/tmp/serving-cert",
            "--authentication=none",
            "--authorization=none",
        ],
        "readinessProbe": {"httpGet": {**probe, "path": "/readyz"}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {**probe, "path": "/livez"}, "periodSeconds": 10},
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
        "volumeMounts": [
            {"name": "pods", "mountPath": "/etc/edl-adapter", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "nodeSelector": {"kubernetes.io/hostname": node},  # the node with the image
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True},
                    "containers": [container],
                    "volumes": [
                        {"name": "pods", "configMap": {"name": "adapter-pods"}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def test_kubelet_runs_the_adapter_image_until_its_readiness_probe_passes(
    kubelet_node: KubeletNode,
    edl_images: dict[str, str],
    kube_api: client.ApiClient,
    kubectl: Kubectl,
    namespace: str,
) -> None:
    image = edl_images["adapter"]
    kubelet_node.import_image(image)
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    core.create_namespaced_config_map(
        namespace,
        as_body({"metadata": {"name": "adapter-pods"}, "data": {"pods.yaml": "pods: []\n"}}),
    )
    port = free_port()
    apps.create_namespaced_deployment(
        namespace, as_body(_deployment(image, port, kubelet_node.name))
    )

    wait_rollout(kube_api, namespace, NAME, timeout_s=240)

    (pod,) = core.list_namespaced_pod(namespace).items
    assert pod.spec.node_name == kubelet_node.name
    statuses = pod.status.container_statuses or []
    assert len(statuses) == 1, statuses
    status = statuses[0]
    assert status.ready and status.container_id.startswith("containerd://"), status
    assert status.restart_count == 0, status
    log = kubectl("logs", "-n", namespace, f"deployment/{NAME}", timeout_s=60)
    assert f"serving on 127.0.0.1:{port} (https)" in log, log
    assert "static pods: 0 from /etc/edl-adapter/pods.yaml" in log, log
