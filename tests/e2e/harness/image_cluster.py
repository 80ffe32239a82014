"""A control plane whose pods run from EDL's container images (host network).

Shared by the install tests (kustomize and Helm). Two ways to run the pods:

* `image_cluster`: a control plane of its own (one APIService has one server, and the pod
  runner's session control plane's belongs to the harness's adapter process) whose pod runner
  runs each pod from its image under podman, each on a loopback address of its own;
* `kubelet_image_cluster`: the kubelet session's control plane and its real nodes
  (`KubeletNodeGroup`: kubelet + containerd, each node on a loopback address of its own, which
  is its host-network pods' IP). No test of that session runs the harness's adapter process, so
  its APIServices are free for the adapter pods.

What the harness adds on top of a user's install, and why: all pods share the host's network
namespace, so each process is told to listen on its own pod IP (EDL_ADAPTER_HOST,
EDL_AGENT_HOST); the adapter's Service becomes `type: ExternalName` pointing at the harness's
kube-proxy stand-in (harness/serviceproxy.py: there is no kube-proxy, and pod IPs are loopback
addresses, which an EndpointSlice may not hold), keeping its selector and ports. On the
kubelet's nodes the Deployments also get `hostNetwork: true` (no CNI) and
`KUBERNETES_SERVICE_HOST/PORT` = kube-apiserver's loopback address (the kubelet's values name
the `kubernetes` Service's ClusterIP, which only kube-proxy makes reachable).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import requests
import yaml
from kubernetes import client, config

from tests.e2e.harness.containers import ContainerSettings, PodmanContainers
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.incluster import apiserver_env
from tests.e2e.harness.install import json_patch, write_overlay
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.e2e.harness.podrunner import LoopbackAddressPool, PodRunner, PodRunnerSettings
from tests.e2e.harness.processes import HarnessError
from tests.e2e.harness.serviceproxy import ServiceProxy
from tests.e2e.harness.session import LOG_SOURCES, Kubectl, work_root
from tests.support.kustomize import ROOT

ADAPTER_NS = "edl-system"
ADAPTER = "edl-metrics-adapter"
TRAINER = "digits-trainer"
TRAINER_NS = "ml"  # the digits example's namespace


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def image_parts(ref: str) -> tuple[str, str]:
    name, _, tag = ref.rpartition(":")
    return name, tag


@dataclass(frozen=True)
class ContainerFacts:
    """How a pod's (first) container runs, as its runtime says."""

    user: str
    """The uid the process runs as."""
    read_only_root: bool
    host_network: bool
    runtime: str
    """Who runs it: `podman` or `containerd` (the kubelet's)."""


class ContainerRuntime(Protocol):
    def facts(self, pod: Any) -> ContainerFacts:
        """`pod` (a V1Pod)'s first container."""
        ...


@dataclass
class PodmanRuntime:
    containers: PodmanContainers

    def facts(self, pod: Any) -> ContainerFacts:
        inspected = self.containers.inspect(str(pod.metadata.uid))
        return ContainerFacts(
            user=str(inspected["Config"]["User"]).split(":")[0],
            read_only_root=bool(inspected["HostConfig"]["ReadonlyRootfs"]),
            host_network=inspected["HostConfig"]["NetworkMode"] == "host",
            runtime="podman",
        )


@dataclass
class KubeletRuntime:
    nodes: KubeletNodeGroup

    def facts(self, pod: Any) -> ContainerFacts:
        """From the OCI spec containerd holds (`ctr containers info`) on the pod's node, and
        the network namespace of the container's process (`ctr tasks ls`: its PID), compared
        with this process's: the host's."""
        (node,) = [n for n in self.nodes.nodes if n.name == pod.spec.node_name]
        status = (pod.status.container_statuses or [None])[0]
        if status is None or not str(status.container_id or "").startswith("containerd://"):
            raise HarnessError(f"pod {pod.metadata.name}: no containerd container: {status}")
        cid = status.container_id.split("://")[1]
        info = json.loads(node.ctr("containers", "info", cid))
        spec = info["Spec"]
        tasks = [line.split() for line in node.ctr("tasks", "ls").splitlines()[1:]]
        (pid,) = [int(t[1]) for t in tasks if t and t[0] == cid]
        host_net = os.readlink("/proc/self/ns/net")
        return ContainerFacts(
            user=str(spec["process"]["user"]["uid"]),
            read_only_root=bool(spec["root"].get("readonly", False)),
            host_network=os.readlink(f"/proc/{pid}/ns/net") == host_net,
            runtime="containerd",
        )


@dataclass
class Cluster:
    cp: ControlPlane
    api: client.ApiClient
    kubectl: Kubectl
    runtime: ContainerRuntime
    images: dict[str, str]
    overlays: Path
    proxy_address: str
    host_network: bool = False
    """Deployments get `hostNetwork: true` (the kubelet's nodes; podman puts every pod there)."""
    extra_env: tuple[dict[str, Any], ...] = ()
    """Added to every EDL container's env (the kubelet's nodes: `apiserver_env`)."""

    def _pod_ops(self) -> list[dict[str, Any]]:
        if not self.host_network:
            return []
        return [{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True}]

    def _namespace_patches(self, namespace: str) -> list[dict[str, Any]]:
        """PodSecurity `privileged` for `namespace` where pods need the host's network: the
        manifests' `restricted` (and `baseline`) refuse `hostNetwork` and host ports."""
        if not self.host_network:
            return []
        label = "/metadata/labels/pod-security.kubernetes.io~1"
        ops = (
            {"op": "replace", "path": label + m, "value": "privileged"} for m in ("enforce", "warn")
        )
        return [json_patch("Namespace", namespace, *ops)]

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
                    *self.extra_env,
                ],
            },
            *self._pod_ops(),
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
            patches=[bind_pod_ip, through_proxy, *self._namespace_patches(ADAPTER_NS)],
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
            *({"op": "add", "path": f"{container}/env/-", "value": e} for e in self.extra_env),
            *({"op": "add", "path": f"{container}/command/-", "value": a} for a in more),
            *self._pod_ops(),
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
            patches=[deployment, hpa, *self._namespace_patches(TRAINER_NS)],
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
        runtime = PodmanRuntime(containers)
        yield Cluster(cp, api, kubectl, runtime, edl_images, work / "overlays", proxy.address)
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


@contextlib.contextmanager
def kubelet_image_cluster(
    cp: ControlPlane,
    nodes: KubeletNodeGroup,
    proxy_address: str,
    edl_images: dict[str, str],
    namespaces: tuple[str, ...],
) -> Iterator[Cluster]:
    """The kubelet session's control plane, its pods run by `nodes` from EDL's images.

    The adapter and trainer images are imported into every node first. At the end every pod in
    `namespaces` is deleted (grace 1 s: the next test's pods need the nodes' ports), then what
    the test applied from its overlays (`kubectl delete -k`: the APIServices, cluster roles)
    and `namespaces` themselves (waited for, bounded); the nodes stay for the session's other
    tests.
    """
    for key in ("adapter", "trainer"):
        took = nodes.import_image(edl_images[key])
        print(f"imported {edl_images[key]} into the nodes (s): {took}")
    api = config.new_client_from_config(config_file=str(cp.kubeconfig))
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(cp.kubeconfig)))
    proxy = ServiceProxy(core, proxy_address, (ADAPTER_NS,))
    proxy.start()
    overlays = cp.work_dir / f"overlays-{uuid.uuid4().hex[:6]}"
    kubectl = Kubectl(shutil.which("kubectl") or "/usr/bin/kubectl", cp.kubeconfig)
    try:
        yield Cluster(
            cp,
            api,
            kubectl,
            KubeletRuntime(nodes),
            edl_images,
            overlays,
            proxy.address,
            host_network=True,
            extra_env=tuple(apiserver_env(cp)),
        )
    finally:
        for ns in namespaces:
            try:
                client.CoreV1Api(api).delete_collection_namespaced_pod(ns, grace_period_seconds=1)
            except client.ApiException as e:
                print(f"deleting the pods of {ns}: {e.status} {e.reason}")
        applied = sorted(overlays.glob("*/kustomization.yaml")) if overlays.exists() else []
        for kustomization in applied:
            try:
                kubectl("delete", "-k", str(kustomization.parent), "--ignore-not-found",
                        "--wait=false", timeout_s=60)  # fmt: skip
            except AssertionError as e:  # Kubectl's failure
                print(f"deleting {kustomization.parent}: {e}")
        try:  # gone before the next module creates them again (Helm keeps its namespaces)
            kubectl("delete", "namespace", *namespaces, "--ignore-not-found", "--timeout=150s",
                    timeout_s=170)  # fmt: skip
        except AssertionError as e:
            print(f"deleting namespaces {namespaces}: {e}")
        proxy.stop()


def quantity(text: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes a rate (`1500m`, `3`)."""
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def agent_gauge(ip: str, name: str) -> float | None:
    """A gauge from the agent's /metrics (what `kubectl port-forward` + curl would show)."""
    try:
        body = requests.get(f"http://{ip}:9400/metrics", timeout=2).text
    except requests.RequestException:
        return None
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", body, re.M)
    return float(m.group(1)) if m else None
