"""The harness itself: a real control plane answers kubectl, and the pod runner acts as kubelet."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import requests
from kubernetes import client

from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings
from tests.e2e.harness.processes import HarnessError
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import METRICS_PORT, create_trainer_job
from tests.support.waiting import wait_for


def test_control_plane_serves_kubectl(control_plane: ControlPlane, kubectl: Kubectl) -> None:
    assert kubectl("get", "--raw", "/readyz").strip() == "ok"
    version = json.loads(kubectl("get", "--raw", "/version"))
    assert version["gitVersion"].startswith("v1.35.")
    # The aggregator's front-proxy settings are published for extension API servers.
    cm = json.loads(
        kubectl(
            "get", "configmap", "-n", "kube-system", "extension-apiserver-authentication", "-o=json"
        )
    )
    assert cm["data"]["requestheader-allowed-names"] == '["front-proxy-client"]'
    assert "BEGIN CERTIFICATE" in cm["data"]["requestheader-client-ca-file"]
    for component in control_plane.components():
        assert component.alive(), component.describe_failure("died")


def test_pod_runner_runs_pods_on_their_own_loopback_address(e2e_ns: E2ENamespace) -> None:
    job = create_trainer_job(e2e_ns.api, e2e_ns.name, e2e_ns.load_dir, replicas=2)
    job.set_load(40.0)
    core = client.CoreV1Api(e2e_ns.api)
    wait_for(lambda: job.ready_replicas() == 2, timeout_s=60, what="2 ready trainer pods")

    pods = core.list_namespaced_pod(e2e_ns.name, label_selector="app=trainer").items
    ips = {p.metadata.name: p.status.pod_ip for p in pods}
    assert len(set(ips.values())) == 2
    for pod in pods:
        # A loopback podIP passes pod status validation (127.0.0.0/8 is only refused for
        # Endpoints/EndpointSlices), so each pod gets a distinct 127.x.y.z and port 9400.
        assert ipaddress.ip_address(str(pod.status.pod_ip)).is_loopback
        assert pod.status.phase == "Running"
        assert pod.spec.node_name is None
        conds = {c.type: c.status for c in pod.status.conditions}
        assert conds["Ready"] == "True"
        text = requests.get(f"http://{pod.status.pod_ip}:{METRICS_PORT}/metrics", timeout=5).text
        assert "edl_trainer_samples_total" in text
    assert e2e_ns.runner.running() == ips

    # Scaling down deletes a pod at once (unbound) and its process stops.
    job.apps.patch_namespaced_deployment_scale(job.name, e2e_ns.name, {"spec": {"replicas": 1}})
    wait_for(lambda: len(e2e_ns.runner.running()) == 1, timeout_s=30, what="one pod process left")
    survivor = next(iter(e2e_ns.runner.running().values()))
    gone = next(ip for ip in ips.values() if ip != survivor)
    try:
        requests.get(f"http://{gone}:{METRICS_PORT}/metrics", timeout=2)
        raise AssertionError(f"the deleted pod's process still answers on {gone}")
    except requests.ConnectionError:
        pass
    assert not e2e_ns.runner.errors


def test_a_component_that_fails_to_start_fails_with_its_log_tail(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # A second, deliberately broken control plane: kube-apiserver rejects the unknown gate.
    broken = ControlPlane(
        ControlPlaneSettings(
            bin_dir=control_plane.settings.bin_dir,
            work_dir=tmp_path / "broken",
            extra_feature_gates={"EdlNoSuchGate": True},
            ready_timeout_s=60,
        )
    )
    try:
        with pytest.raises(HarnessError) as err:
            broken.start()
    finally:
        broken.stop()
    message = str(err.value)
    assert "kube-apiserver exited before becoming healthy" in message
    assert "EdlNoSuchGate" in message  # the log tail names the cause
    assert broken.etcd is not None and not broken.etcd.alive()
