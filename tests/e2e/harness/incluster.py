"""EDL's trainer as the product installs it, run by the e2e node's kubelet with its own token.

The kubelet session's control plane (`kubelet_session_settings`) gives pods what a real cluster
gives them: the ServiceAccount admission plugin adds the projected token volume
(`kube-api-access-*`: a pod-bound token the kubelet requests and refreshes, `ca.crt` from the
namespace's ConfigMap kube-root-ca.crt, the namespace), and kube-controller-manager keeps
EndpointSlices. `product_objects` takes the digits job's ServiceAccount, Role, RoleBinding and
Deployment as a user installs them: from `manifests/examples/digits-trainer` as `kubectl
kustomize` renders it, or from `charts/edl-trainer` as `helm template` renders its default
values (with the world ConfigMap the chart creates); `node_overrides` changes only what this
node needs.

`KUBERNETES_SERVICE_HOST`/`_PORT`: the kubelet sets them from the `kubernetes` Service's
ClusterIP (10.0.0.1 here), which only kube-proxy makes reachable, and this node runs none. The
pod's own `env` wins over the kubelet's service variables, so `node_overrides` sets them to
kube-apiserver's loopback address (the pod shares the host's network); the client still checks
kube-apiserver's certificate against the projected `ca.crt`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kubernetes import client

from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings
from tests.support.helm import CHARTS, template
from tests.support.kustomize import render

EXAMPLE = "manifests/examples/digits-trainer"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding")
PRODUCT_KINDS = ("ServiceAccount", "ConfigMap", "Role", "RoleBinding", "Deployment")
"""What `product_objects` keeps: not the HPA (no metrics adapter runs beside the node)."""
SOURCES = ("kustomize", "helm")
CHART_VALUES = CHARTS / "edl-trainer" / "examples" / "default.yaml"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the projected token volume is mounted (what `load_incluster_config` reads)."""


def kubelet_session_settings(settings: ControlPlaneSettings) -> ControlPlaneSettings:
    """`settings` with ServiceAccount tokens for pods and the EndpointSlice controller on."""
    extra = (*settings.extra_controllers, "endpointslice-controller")
    return replace(settings, service_accounts=True, extra_controllers=extra)


def example_objects(namespace: str, kinds: tuple[str, ...] = RBAC_KINDS) -> list[dict[str, Any]]:
    """The digits example's objects of `kinds`, in `namespace` (subjects included)."""
    docs = [d for d in render(EXAMPLE) if d["kind"] in kinds]
    for d in docs:
        d["metadata"]["namespace"] = namespace
        for subject in d.get("subjects", []):
            subject["namespace"] = namespace
    return docs


def product_objects(source: str, namespace: str) -> list[dict[str, Any]]:
    """The digits job's `PRODUCT_KINDS` from `source` (`SOURCES`), in `namespace`."""
    if source == "helm":
        docs = template("edl-trainer", CHART_VALUES, namespace=namespace, release="digits")
        return [d for d in docs if d["kind"] in PRODUCT_KINDS]
    if source == "kustomize":
        return example_objects(namespace, PRODUCT_KINDS)
    raise ValueError(f"source {source!r}: one of {SOURCES}")


def create_objects(api: client.ApiClient, namespace: str, docs: list[dict[str, Any]]) -> None:
    """Creates `docs` (of `PRODUCT_KINDS`) in `namespace`, in their order."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    create: dict[str, Callable[..., object]] = {
        "ServiceAccount": core.create_namespaced_service_account,
        "ConfigMap": core.create_namespaced_config_map,
        "Role": rbac.create_namespaced_role,
        "RoleBinding": rbac.create_namespaced_role_binding,
        "Deployment": apps.create_namespaced_deployment,
    }
    for doc in docs:
        create[doc["kind"]](namespace, as_body(doc))


def apiserver_env(cp: ControlPlane) -> list[dict[str, str]]:
    """The pod env that points the in-cluster client at kube-apiserver (no kube-proxy here)."""
    return [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(cp.apiserver_port)},
    ]


def node_overrides(
    deployment: dict[str, Any],
    cp: ControlPlane,
    *,
    agent_port: int,
    trainer_args: list[str],
    node: str,
) -> dict[str, Any]:
    """The example's Deployment as this node runs it; everything else stays the product's.

    * on `node` (`nodeSelector` by its hostname label): the one node the image was imported
      into, of the session's several;
    * `hostNetwork: true` (the node has no CNI), the agent's /metrics, /healthz and /readyz on
      `agent_port` (EDL_AGENT_PORT; a free host port, not 9400) and its trainer's rendezvous
      ports `auto` (EDL_TRAINER_PORTS: free ones, not 29543-4, which another host-network
      test may hold);
    * the image from the local build, `imagePullPolicy: Never`;
    * kube-apiserver's address (`apiserver_env`);
    * requests of 100m CPU and 256Mi (the node is a shared 2-core machine);
    * the trainer's arguments after `--` replaced by `trainer_args` (a shorter run).
    """
    d = copy.deepcopy(deployment)
    spec = d["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "kubernetes.io/hostname": node}
    (c,) = spec["containers"]
    c["imagePullPolicy"] = "Never"
    c["ports"] = [{"name": "metrics", "containerPort": agent_port}]
    c["env"] = [
        *c.get("env", []),
        {"name": "EDL_AGENT_PORT", "value": str(agent_port)},
        {"name": "EDL_TRAINER_PORTS", "value": "auto"},
        *apiserver_env(cp),
    ]
    c["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    command = list(c["command"])
    c["command"] = [*command[: command.index("--") + 1], *trainer_args]
    return d
