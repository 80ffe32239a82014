"""The elastic digits job as a Deployment of EDL's trainer image, run by real kubelets.

Shared by the kubelet e2e tests (tests/e2e/agent/test_kubelet_elastic.py) and the pod
deletion bench (bench/bench_kubelet_pod_deletion.py). Each pod runs `edl-agent run --elastic
--membership kubernetes` around `examples.train_digits_elastic` in `localhost/edl-trainer`:

* host network (no CNI): the agent listens on its pod IP (`status.podIP` from the downward
  API), which is its node's loopback address; its port is a `containerPort`, so kube-scheduler's
  NodePorts filter puts at most one trainer on a node;
* the agent's in-cluster client: the projected ServiceAccount token and CA that the
  ServiceAccount admission plugin adds and the kubelet fills (the kubelet session's control
  plane runs the plugin and the root CA publisher: `incluster.kubelet_session_settings`),
  with `KUBERNETES_SERVICE_HOST/PORT` pointing at kube-apiserver on 127.0.0.1 (there is no
  kube-proxy for the `kubernetes` Service's ClusterIP);
* what the test reads leaves the container through a hostPath folder the test owns
  (`/edl-test`: the sample ledger, the members' state, the step gate, the result).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import (
    AGENT_TIMINGS,
    JOB,
    SERVICE_ACCOUNT,
    STEP_SLEEP,
    TRAIN_ARGS,
    grant_agent_access,
)
from tests.e2e.harness.incluster import apiserver_env
from tests.e2e.harness.session import Kubectl
from tests.support.waiting import wait_for

NAME = "trainer"
LABELS = {"app.kubernetes.io/name": "edl-kubelet-trainer"}
AGENT_PORT = 9400
SHARED = "/edl-test"
"""Where the test's hostPath folder is mounted in every trainer container."""
CHECKPOINTS = "/edl-checkpoints"
"""Where the checkpoint volume (a hostPath folder) is mounted, with `checkpoints=`."""


def shared_folder(path: Path) -> Path:
    """`path`, made, writable by the image's non-root user (uid 65532)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


def prepare_namespace(
    api: client.ApiClient,
    cp: ControlPlane,
    kubectl: Kubectl,
    namespace: str,
    scratch: Path,
    *,
    rules: list[dict[str, Any]] | None = None,
    sa_labels: dict[str, str] | None = None,
) -> Path:
    """Namespace `namespace` with the agent's ServiceAccount (labelled `sa_labels`), Role
    (`rules`, default the agent's) and RoleBinding. Returns the token kubeconfig
    `grant_agent_access` writes in `scratch`: the pods never use it (they have the kubelet's
    projected token), a test may speak as the ServiceAccount with it."""
    labels = {"edl.e2e/test": "true"}
    body = {"metadata": {"name": namespace, "labels": labels}}
    client.CoreV1Api(api).create_namespace(as_body(body))
    path = scratch / "agent.kubeconfig"
    return grant_agent_access(namespace, api, kubectl, cp, path, rules, sa_labels)


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _host_path(name: str, path: Path) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": str(path), "type": "Directory"}}


def trainer_deployment(
    image: str,
    shared: Path,
    cp: ControlPlane,
    *,
    replicas: int,
    grace_s: int = 30,
    name: str = NAME,
    agent_args: tuple[str, ...] = (),
    trainer: list[str] | None = None,
    train_args: list[str] | None = None,
    env: list[dict[str, Any]] | None = None,
    checkpoints: Path | None = None,
) -> dict[str, Any]:
    """The trainer Deployment `name`; `shared` is the test's hostPath folder (`shared_folder`).

    `agent_args` go to `edl-agent run` (e.g. `--on-finished scale-to-zero`; the agents then
    scale this Deployment: EDL_DEPLOYMENT is `name`); `trainer` replaces the command after
    `--` (default: the digits job, its result and step gate in `SHARED`, with `train_args`,
    by default `TRAIN_ARGS` at `STEP_SLEEP` a step); `env` is added to the container's;
    `checkpoints` (a `shared_folder`) is mounted at `CHECKPOINTS` in every pod and is the
    agents' `EDL_CHECKPOINT_URL`.
    """
    train = trainer or [
        "python", "-m", "examples.train_digits_elastic",
        *(train_args or [*TRAIN_ARGS, "--step-sleep", str(STEP_SLEEP)]),
        "--result", f"{SHARED}/result.json", "--step-gate", f"{SHARED}/step-gate",
    ]  # fmt: skip
    command = [
        "edl-agent", "run", "--host=$(POD_IP)", f"--port={AGENT_PORT}", "--elastic",
        "--job", JOB, "--membership", "kubernetes", "--min", "1", "--max", "4", *agent_args,
        "--", *train,
    ]  # fmt: skip
    env_ = [
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_UID", "metadata.uid"),
        _field_env("POD_IP", "status.podIP"),
        _field_env("EDL_NAMESPACE", "metadata.namespace"),
        *apiserver_env(cp),
        {"name": "EDL_ELASTIC_DIR", "value": f"{SHARED}/members/$(POD_NAME)"},
        {"name": "EDL_SAMPLE_LEDGER", "value": f"{SHARED}/ledger"},
        *AGENT_TIMINGS,
        {"name": "EDL_DRAIN_TIMEOUT", "value": "20"},
        {"name": "PADDLE_DISTRI_BACKEND", "value": "gloo"},
        {"name": "EDL_DEPLOYMENT", "value": name},
        *(env or []),
    ]
    mounts = [{"name": "shared", "mountPath": SHARED}]
    volumes = [_host_path("shared", shared)]
    if checkpoints is not None:
        env_.append({"name": "EDL_CHECKPOINT_URL", "value": CHECKPOINTS})
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINTS})
        volumes.append(_host_path("checkpoints", checkpoints))
    container = {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "Never",  # imported from the local build: no registry
        "command": command,
        "env": env_,
        "ports": [{"name": "metrics", "containerPort": AGENT_PORT}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": AGENT_PORT}, "periodSeconds": 2},
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": mounts,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "hostNetwork": True,
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "terminationGracePeriodSeconds": grace_s,
                    "securityContext": {"runAsNonRoot": True},
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def container_origins(pods: list[Any]) -> list[str]:
    """One line per pod: its node and the container the kubelet made, from which image (for
    the test log: the pods ran from EDL's image, on a real kubelet)."""
    return [
        f"{p.metadata.name} on {p.spec.node_name}: {s.container_id} from {s.image} ({s.image_id})"
        for p in pods
        for s in p.status.container_statuses or []
    ]


def started_from(pods: list[Any], image: str) -> None:
    """Each pod's container was created by its node's containerd from `image` (printed: the
    test log says which containers, on which node, from which image)."""
    print("\n".join(container_origins(pods)))
    for pod in pods:
        (status,) = pod.status.container_statuses
        assert status.container_id.startswith("containerd://"), status
        assert status.image.endswith(image.rpartition("/")[2]), status


def log_tails(api: client.ApiClient, pods: list[Any], lines: int = 15) -> list[str]:
    """Each of `pods`' last `lines` log lines under a header naming its node (for a failed
    wait's message)."""
    core = client.CoreV1Api(api)
    out = []
    for pod in pods:
        try:
            text = core.read_namespaced_pod_log(
                pod.metadata.name, pod.metadata.namespace, tail_lines=lines
            )
        except client.ApiException as e:
            text = f"({e.status} {e.reason})"
        out.append(f"----- {pod.metadata.name} on {pod.spec.node_name} -----\n{text}")
    return out


def trainer_pods(api: client.ApiClient, namespace: str) -> list[Any]:
    """The trainer Deployment's pods (V1Pod), in creation order."""
    selector = ",".join(f"{k}={v}" for k, v in LABELS.items())
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(pods, key=lambda p: p.metadata.creation_timestamp)


def remove_job(api: client.ApiClient, namespace: str, deployment: str, grace_s: int) -> None:
    """A test's teardown: the trainer Deployment, its pods gone (within their grace), then the
    namespace (in the background). A failure on the way is printed, never raised: the
    namespace's deletion takes what is left."""
    try:
        client.AppsV1Api(api).delete_namespaced_deployment(deployment, namespace)
        wait_for(lambda: not trainer_pods(api, namespace), timeout_s=grace_s + 30, what="pods gone")
    except Exception as e:  # teardown goes on: the namespace takes the rest
        print(f"deleting the trainers of {namespace}: {e!r}")
    client.CoreV1Api(api).delete_namespace(namespace, propagation_policy="Background")
