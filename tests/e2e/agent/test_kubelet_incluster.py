"""The agent's in-cluster client in a pod the kubelet runs, with the token the kubelet gives it.

The digits job's ServiceAccount, Role, RoleBinding and Deployment as a user installs them, once
from manifests/examples/digits-trainer (`kubectl kustomize`) and once from charts/edl-trainer
(`helm template`, default values; `incluster.product_objects`, and `incluster.node_overrides`
for the few changes this node needs) in a namespace of their own, EDL's Paddle trainer image
imported into
the node's containerd, and a Service on the agent's port. The kubelet session's control plane
runs the ServiceAccount admission plugin: the pod gets the projected token volume and nothing
else (no kubeconfig), and `edl-agent run --membership kubernetes` reads it with
`load_incluster_config`. Checked as a user would: the pod's readiness against the agent's
/readyz (and that no EndpointSlice runs ahead of it); what the token is refused, from inside the pod
(`kubectl exec`); the job's Lease and world ConfigMap; the job trained to its end.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
import urllib3
from kubernetes import client

from agent.elastic.kubernetes_store import FINISHED, LABEL_JOB, STATE_LABEL
from agent.elastic.world import World
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.incluster import (
    SA_DIR,
    SOURCES,
    create_objects,
    node_overrides,
    product_objects,
)
from tests.e2e.harness.kubelet_node import NODE_NAME, KubeletNode
from tests.e2e.harness.processes import free_port
from tests.e2e.harness.session import Kubectl
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.kubelet]

JOB = "digits"
DEPLOYMENT = "digits-trainer"
SELECTOR = "app.kubernetes.io/name=digits-trainer"
WORLD_CM = f"edl-{JOB}-world"
TRAINER_ARGS = ["python", "-m", "examples.train_digits_elastic", "--epochs", "4",
                "--step-sleep", "0.3"]  # fmt: skip
"""About 110 steps, 35 s or more of training: the pod is still training when the token is
tried from inside it, and the job still ends within the test's bounds."""


@dataclass(frozen=True)
class Tick:
    """One look at the pod's readiness, as three parties see it."""

    endpoint_ready: bool | None
    """The pod's endpoint in its Service's EndpointSlice (None: not listed)."""
    running: bool
    pod_ready: bool
    readyz: int | None
    """The agent's own /readyz status (None: not answering yet)."""
    reason: str


@dataclass
class TrainerPod:
    source: str
    """Where its objects came from (`incluster.SOURCES`)."""
    namespace: str
    port: int
    pod: Any
    ticks: list[Tick] = field(default_factory=list)

    def changes(self) -> list[Tick]:
        """The ticks that differ from the one before (for a failure's message)."""
        return [t for i, t in enumerate(self.ticks) if i == 0 or t != self.ticks[i - 1]]


def _readyz(port: int) -> tuple[int | None, str]:
    try:
        r = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
    except requests.RequestException as e:
        return None, type(e).__name__
    return r.status_code, r.text.strip()


def _look(core: client.CoreV1Api, disc: client.DiscoveryV1Api, ns: str, port: int) -> Tick | None:
    """Slice, then pod, then /readyz: a later party never runs ahead of an earlier one."""
    slices = disc.list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={DEPLOYMENT}"
    ).items
    pods = core.list_namespaced_pod(ns, label_selector=SELECTOR).items
    if len(pods) != 1:
        return None
    pod = pods[0]
    endpoint: bool | None = None
    for s in slices:
        for e in s.endpoints or []:
            if e.target_ref is not None and e.target_ref.name == pod.metadata.name:
                endpoint = bool(e.conditions.ready)
    statuses = pod.status.container_statuses or []
    running = bool(statuses and statuses[0].state.running)
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    code, reason = _readyz(port)
    return Tick(endpoint, running, ready, code, reason[:200])


def _service(port: int) -> dict[str, Any]:
    return {
        "metadata": {"name": DEPLOYMENT},
        "spec": {
            "selector": {"app.kubernetes.io/name": DEPLOYMENT},
            "ports": [{"name": "metrics", "port": port, "targetPort": "metrics"}],
        },
    }


@pytest.fixture(scope="module", params=SOURCES)
def trainer_pod(
    request: pytest.FixtureRequest,
    kubelet_node: KubeletNode,
    edl_images: dict[str, str],
    kube_api: client.ApiClient,
    control_plane: ControlPlane,
) -> Iterator[TrainerPod]:
    """The example's trainer job of one pod, watched from its creation until it is Ready."""
    kubelet_node.import_image(edl_images["trainer"])
    source = str(request.param)
    ns = f"incluster-{source}-{uuid.uuid4().hex[:6]}"
    core, disc = client.CoreV1Api(kube_api), client.DiscoveryV1Api(kube_api)
    core.create_namespace(as_body({"metadata": {"name": ns}}))
    try:
        port = free_port()
        core.create_namespaced_service(ns, as_body(_service(port)))
        docs = product_objects(source, ns)
        (i,) = [i for i, d in enumerate(docs) if d["kind"] == "Deployment"]
        docs[i] = node_overrides(
            docs[i],
            control_plane,
            agent_port=port,
            trainer_args=TRAINER_ARGS,
            node=kubelet_node.name,
        )
        assert (
            docs[i]["spec"]["template"]["spec"]["containers"][0]["image"] == edl_images["trainer"]
        )
        create_objects(kube_api, ns, docs)

        ticks: list[Tick] = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # bounded: 300 s, 0.3 s between looks
            try:
                tick = _look(core, disc, ns, port)
            except (client.ApiException, urllib3.exceptions.HTTPError) as e:
                print(f"a look at the pod failed (the next one will tell): {e!r}")
                tick = None
            if tick is not None:
                ticks.append(tick)
                if tick.pod_ready and tick.readyz == 200:
                    break
            time.sleep(0.3)
        assert ticks and ticks[-1].pod_ready, (ticks[-5:], kubelet_node.log_tails(20))
        (pod,) = core.list_namespaced_pod(ns, label_selector=SELECTOR).items
        yield TrainerPod(source, ns, port, pod, ticks)
    finally:
        core.delete_namespace(ns, grace_period_seconds=0)


def test_the_agent_pod_is_not_ready_until_its_readyz_says_so(
    trainer_pod: TrainerPod, kube_api: client.ApiClient
) -> None:
    ticks = trainer_pod.ticks
    # its container running while /readyz does not say ready (not answering yet, or 503):
    # not Ready (the condition a Service's EndpointSlice follows). The pod's IP is its node's
    # loopback address, which an EndpointSlice may not hold (validation refuses 127.0.0.0/8),
    # so the slice itself never lists it here: whatever it shows must not run ahead of Ready.
    # Whether a look lands in that window depends on speed (a warm node starts the container
    # and the agent answers between two looks), so it is not required; the kubelet's own
    # failed first probe (the event below) is the window's record.
    waiting = [t for t in ticks if t.running and t.readyz != 200]
    assert all(not t.pod_ready and not t.endpoint_ready for t in waiting), waiting
    # never Ready (nor ready in a slice) before /readyz said so; Ready at the end
    for t in ticks:
        assert not t.endpoint_ready or t.pod_ready, t
        assert not t.pod_ready or t.readyz == 200, t
    last = ticks[-1]
    assert last.pod_ready and last.readyz == 200, last
    assert "trainer running" in last.reason, last
    # the kubelet's own record of the probe it failed before the agent answered (its first
    # probe runs as the container starts, before the agent's server is up: `kubectl describe`)
    events = (
        client.CoreV1Api(kube_api)
        .list_namespaced_event(
            trainer_pod.namespace,
            field_selector=f"involvedObject.name={trainer_pod.pod.metadata.name}",
        )
        .items
    )
    unhealthy = [str(e.message) for e in events if e.reason == "Unhealthy"]
    assert any("Readiness probe failed" in m for m in unhealthy), [e.message for e in events]


REFUSAL_PROBE = """
import json
from kubernetes import client
from agent.elastic.kubernetes_store import load_client_config

load_client_config()  # what the agent does: the projected token, KUBERNETES_SERVICE_HOST/PORT
cfg = client.Configuration.get_default_copy()
api = client.ApiClient()
core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
ns = open("{sa_dir}/namespace").read().strip()
out = {{"host": cfg.host}}
review = client.AuthenticationV1Api(api).create_self_subject_review(
    {{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}})
out["user"] = review.status.user_info.username
out["extra"] = review.status.user_info.extra or {{}}

def attempt(name, call):
    try:
        call()
        out[name] = [200, ""]
    except client.ApiException as e:
        out[name] = [e.status, json.loads(e.body).get("message", "")]

attempt("read its world", lambda: core.read_namespaced_config_map("{world}", ns))
attempt("list secrets", lambda: core.list_namespaced_secret(ns))
attempt("read another job's world", lambda: core.read_namespaced_config_map("edl-other-world", ns))
attempt("patch its deployment", lambda: apps.patch_namespaced_deployment(
    "{deployment}", ns, {{"spec": {{"template": {{"spec": {{"serviceAccountName": "default"}}}}}}}},
    dry_run="All"))
attempt("delete a pod", lambda: core.delete_namespaced_pod("{pod}", ns, dry_run="All"))
print("RESULT " + json.dumps(out))
"""


def test_the_pods_token_is_refused_what_its_role_does_not_allow(
    trainer_pod: TrainerPod,
    kube_api: client.ApiClient,
    kubectl: Kubectl,
    control_plane: ControlPlane,
) -> None:
    ns, pod = trainer_pod.namespace, trainer_pod.pod
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_config_map(
        ns, as_body({"metadata": {"name": "edl-other-world", "labels": {LABEL_JOB: "other"}}})
    )
    script = REFUSAL_PROBE.format(
        sa_dir=SA_DIR, world=WORLD_CM, deployment=DEPLOYMENT, pod=pod.metadata.name
    )
    shown = kubectl("exec", "-n", ns, pod.metadata.name, "-c", "trainer", "--",
                    "python", "-c", script, timeout_s=120)  # fmt: skip
    (line,) = [x for x in shown.splitlines() if x.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))

    account = pod.spec.service_account_name
    assert account, pod.spec
    user = f"system:serviceaccount:{ns}:{account}"
    assert out["host"] == f"https://127.0.0.1:{control_plane.apiserver_port}", out
    assert out["user"] == user, out
    # a pod-bound token, the one the kubelet projected for this pod (not a legacy Secret)
    assert out["extra"].get("authentication.kubernetes.io/pod-name") == [pod.metadata.name], out
    assert out["extra"].get("authentication.kubernetes.io/pod-uid") == [pod.metadata.uid], out
    assert out["read its world"][0] == 200, out
    for what, verb, resource in (
        ("list secrets", "list", "secrets"),
        ("read another job's world", "get", "configmaps"),
        ("patch its deployment", "patch", "deployments"),
        ("delete a pod", "delete", "pods"),
    ):
        status, message = out[what]
        assert status == 403, (what, out)
        assert f'User "{user}" cannot {verb} resource "{resource}"' in message, (what, message)
    # nothing changed
    d = client.AppsV1Api(kube_api).read_namespaced_deployment(DEPLOYMENT, ns)
    assert d.spec.template.spec.service_account_name == account
    assert core.read_namespaced_pod(pod.metadata.name, ns).metadata.deletion_timestamp is None


def test_the_agent_forms_its_world_with_the_projected_token_and_trains_to_the_end(
    trainer_pod: TrainerPod, kube_api: client.ApiClient, kubectl: Kubectl
) -> None:
    ns, pod = trainer_pod.namespace, trainer_pod.pod
    name = pod.metadata.name
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    coord = client.CoordinationV1Api(kube_api)
    # what the pod was given: the projected token volume, no kubeconfig
    assert pod.spec.node_name == NODE_NAME
    expected = {"kustomize": "edl-trainer", "helm": "digits-trainer"}[trainer_pod.source]
    assert pod.spec.service_account_name == expected
    projected = [v for v in pod.spec.volumes if v.projected is not None]
    assert len(projected) == 1, pod.spec.volumes
    sources = projected[0].projected.sources
    assert any(s.service_account_token is not None for s in sources), sources
    assert any(s.config_map is not None and s.config_map.name == "kube-root-ca.crt"
               for s in sources), sources  # fmt: skip
    (container,) = pod.spec.containers
    mounts = {m.mount_path: m.name for m in container.volume_mounts}
    assert mounts.get(SA_DIR) == projected[0].name, mounts
    env = {e.name for e in container.env}
    assert "KUBECONFIG" not in env, env

    # its Lease, owned by its pod, and the world ConfigMap naming it
    lease = coord.read_namespaced_lease(f"edl-{JOB}-{name}", ns)
    assert lease.spec.holder_identity, lease
    assert [o.uid for o in lease.metadata.owner_references or []] == [pod.metadata.uid], lease
    cm = core.read_namespaced_config_map(WORLD_CM, ns)
    world = World.from_json((cm.data or {})["world"])
    assert [m.id for m in world.members] == [name], world

    # it trains to the end: the record finished, the job scaled itself to 0
    def finished() -> bool:
        labels = core.read_namespaced_config_map(WORLD_CM, ns).metadata.labels or {}
        return labels.get(STATE_LABEL) == FINISHED

    wait_for(finished, timeout_s=300, interval_s=1, what=f"job {JOB} finished",
             describe=lambda: kubectl("logs", "-n", ns, name, "--tail=20"))  # fmt: skip
    final = World.from_json((core.read_namespaced_config_map(WORLD_CM, ns).data or {})["world"])
    assert final.finished and (final.finished_at_step or 0) > 0, final
    wait_for(lambda: apps.read_namespaced_deployment(DEPLOYMENT, ns).spec.replicas == 0,
             timeout_s=60, what=f"{DEPLOYMENT} scaled to 0")  # fmt: skip
