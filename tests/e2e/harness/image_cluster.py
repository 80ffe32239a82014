"""A control plane whose pods run from EDL's container images on real kubelets (host network).

Shared by the install tests (kustomize and Helm). `kubelet_image_cluster`: the kubelet
session's control plane and its real nodes (`KubeletNodeGroup`: kubelet + containerd, each
node on a loopback address of its own, which is its host-network pods' IP). No test of that
session runs the harness's adapter process, so its APIServices are free for the adapter pods.

What the harness adds on top of a user's install, and why: the Deployments get
`hostNetwork: true` (no CNI), so all pods share the host's network namespace and each process
is told to listen on its own pod IP (EDL_ADAPTER_HOST, EDL_AGENT_HOST);
`KUBERNETES_SERVICE_HOST/PORT` = kube-apiserver's loopback address (the kubelet's values name
the `kubernetes` Service's ClusterIP, which only kube-proxy makes reachable); the adapter's
Service becomes `type: ExternalName` pointing at the harness's kube-proxy stand-in
(harness/serviceproxy.py: there is no kube-proxy, and pod IPs are loopback addresses, which an
EndpointSlice may not hold), keeping its selector and ports.
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
from typing import Any

import requests
import yaml
from kubernetes import client, config

from edl_common.quantity import parse_quantity
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.incluster import apiserver_env
from tests.e2e.harness.install import json_patch, wait_rollout, write_overlay
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.e2e.harness.processes import HarnessError
from tests.e2e.harness.serviceproxy import ServiceProxy
from tests.e2e.harness.session import Kubectl
from tests.support.kustomize import ROOT
from tests.support.waiting import wait_for

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
    """Who runs it: `containerd` (the kubelet's)."""


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
    runtime: KubeletRuntime
    images: dict[str, str]
    overlays: Path
    proxy_address: str
    extra_env: tuple[dict[str, Any], ...] = ()
    """Added to every EDL container's env (`apiserver_env`: kube-apiserver's address)."""

    def _pod_ops(self) -> list[dict[str, Any]]:
        """`hostNetwork: true`: the nodes have no CNI."""
        return [{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True}]

    def _namespace_patches(self, namespace: str) -> list[dict[str, Any]]:
        """PodSecurity `privileged` for `namespace`, whose pods need the host's network: the
        manifests' `restricted` (and `baseline`) refuse `hostNetwork` and host ports."""
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


def wait_hpa_scales_the_trainer_to_two(cluster: Cluster, hpa: str) -> None:
    """Waits (bounded) until `hpa` (whose HPA: "the chart's", ...) has set the trainer
    Deployment's replicas to 2 and that rollout has finished."""
    apps = client.AppsV1Api(cluster.api)
    wait_for(
        lambda: apps.read_namespaced_deployment(TRAINER, TRAINER_NS).spec.replicas == 2,
        timeout_s=300,
        what=f"{hpa} HPA scaling the trainer to 2",
        describe=lambda: cluster.kubectl("describe", "hpa", TRAINER, "-n", TRAINER_NS),
    )
    wait_rollout(cluster.api, TRAINER_NS, TRAINER, timeout_s=300)


def quantity(text: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes it (`1500m`, `3`, `57902333n`)."""
    return float(parse_quantity(text))


def agent_gauge(ip: str, name: str) -> float | None:
    """A gauge from the agent's /metrics (what `kubectl port-forward` + curl would show)."""
    try:
        body = requests.get(f"http://{ip}:9400/metrics", timeout=2).text
    except requests.RequestException:
        return None
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", body, re.M)
    return float(m.group(1)) if m else None
