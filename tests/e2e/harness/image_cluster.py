"""A control plane whose pods run from EDL's container images (podman, host network).

Shared by the install tests (kustomize and Helm). One APIService has one server, so each test
module gets a control plane of its own. What the harness adds on top of a user's install, and
why: all pods share the host's network namespace, so each process is told to listen on its
own pod IP (EDL_ADAPTER_HOST, EDL_AGENT_HOST); the adapter's Service becomes `type:
ExternalName` pointing at the harness's kube-proxy stand-in (harness/serviceproxy.py: pod IPs
are loopback addresses, which an EndpointSlice may not hold), keeping its selector and ports.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from tests.e2e.harness.containers import ContainerSettings, PodmanContainers
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.install import json_patch, write_overlay
from tests.e2e.harness.podrunner import LoopbackAddressPool, PodRunner, PodRunnerSettings
from tests.e2e.harness.serviceproxy import ServiceProxy
from tests.e2e.harness.session import LOG_SOURCES, Kubectl, work_root
from tests.support.kustomize import ROOT

ADAPTER_NS = "edl-system"
ADAPTER = "edl-metrics-adapter"
TRAINER = "digits-trainer"


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def image_parts(ref: str) -> tuple[str, str]:
    name, _, tag = ref.rpartition(":")
    return name, tag


@dataclass
class Cluster:
    cp: ControlPlane
    api: client.ApiClient
    kubectl: Kubectl
    containers: PodmanContainers
    images: dict[str, str]
    overlays: Path
    proxy_address: str

    def adapter_overlay(self, base: str) -> Path:
        """`base` (manifests/base or an overlay) with our adapter image, as the README says."""
        name, tag = image_parts(self.images["adapter"])
        bind_pod_ip = json_patch(
            "Deployment",
            ADAPTER,
            {
                "op": "add",
                "path": "/spec/template/spec/containers/0/env",
                "value": [
                    field_env("POD_IP", "status.podIP"),
                    {"name": "EDL_ADAPTER_HOST", "value": "$(POD_IP)"},
                ],
            },
        )
        through_proxy = json_patch(
            "Service",
            ADAPTER,
            {"op": "add", "path": "/spec/type", "value": "ExternalName"},
            {"op": "add", "path": "/spec/externalName", "value": self.proxy_address},
        )
        return write_overlay(
            self.overlays / base.replace("/", "-"),
            base,
            images=[{"name": "localhost/edl", "newName": name, "newTag": tag}],
            patches=[bind_pod_ip, through_proxy],
        )

    def trainer_overlay(self, key: str, image: str, namespace: str | None = None) -> Path:
        name, tag = image_parts(image)
        container = "/spec/template/spec/containers/0"
        more = ["--epochs", "400", "--step-sleep", "0.05"]
        deployment = json_patch(
            "Deployment",
            TRAINER,
            {
                "op": "add",
                "path": f"{container}/env/-",
                "value": {"name": "EDL_AGENT_HOST", "value": "$(POD_IP)"},
            },
            *({"op": "add", "path": f"{container}/command/-", "value": a} for a in more),
        )
        alternative = ROOT / "manifests/examples/digits-trainer/hpa-throughput.yaml"
        throughput = yaml.safe_load(alternative.read_text())["spec"]
        hpa = json_patch(
            "HorizontalPodAutoscaler",
            TRAINER,
            {"op": "replace", "path": "/spec/maxReplicas", "value": 2},
            {"op": "replace", "path": "/spec/metrics", "value": throughput["metrics"]},
            {"op": "replace", "path": "/spec/behavior", "value": throughput["behavior"]},
        )
        return write_overlay(
            self.overlays / key,
            "manifests/examples/digits-trainer",
            images=[{"name": "localhost/edl-trainer", "newName": name, "newTag": tag}],
            patches=[deployment, hpa],
            namespace=namespace,
        )

    def apiservice(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", "apiservice", name, "-o", "json")))

    def available(self, name: str) -> bool:
        conds = self.apiservice(name).get("status", {}).get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conds)

    def raw(self, path: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", "--raw", path)))


@contextlib.contextmanager
def image_cluster(edl_images: dict[str, str], namespaces: tuple[str, ...]) -> Iterator[Cluster]:
    """A control plane of its own whose pods in `namespaces` run from EDL's images."""
    work = work_root()
    cp = ControlPlane(ControlPlaneSettings(bin_dir=ensure_binaries(), work_dir=work))
    LOG_SOURCES.append(cp)
    runners: list[PodRunner] = []
    containers: PodmanContainers | None = None
    proxy: ServiceProxy | None = None
    try:
        cp.start()
        assert cp.pki is not None
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))

        def own_client() -> client.CoreV1Api:  # one per thread-owning component
            return client.CoreV1Api(config.new_client_from_config(config_file=str(cp.kubeconfig)))

        containers = PodmanContainers(
            own_client(),
            ContainerSettings(
                work_dir=work / "containers",
                api_host="127.0.0.1",
                api_port=cp.apiserver_port,
                cluster_ca=cp.pki.ca.cert,
                run_id=uuid.uuid4().hex[:12],
            ),
        )
        pool = LoopbackAddressPool()
        proxy = ServiceProxy(own_client(), str(pool.network[1]), (ADAPTER_NS,))  # .1: never a pod's
        proxy.start()
        for ns in namespaces:
            runner_api = config.new_client_from_config(config_file=str(cp.kubeconfig))
            settings = PodRunnerSettings(
                namespace=ns, log_dir=cp.log_dir / "pods", processes=containers, max_restarts=5
            )
            runner = PodRunner(runner_api, settings, pool)
            runner.start()
            runners.append(runner)
            LOG_SOURCES.append(runner)
        kubectl = Kubectl(shutil.which("kubectl") or "/usr/bin/kubectl", cp.kubeconfig)
        yield Cluster(cp, api, kubectl, containers, edl_images, work / "overlays", proxy.address)
    finally:
        for runner in runners:
            runner.stop()
            LOG_SOURCES.remove(runner)
        if proxy is not None:
            proxy.stop()
        if containers is not None:
            containers.cleanup()
        cp.stop()
        LOG_SOURCES.remove(cp)
