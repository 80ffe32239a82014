"""What the kustomize install tests (tests/e2e/install/test_kubelet_install.py) check on a
`Cluster` (harness/image_cluster.py) whose pods the kubelet nodes run."""

from __future__ import annotations

import json

from kubernetes import client

from tests.e2e.harness.image_cluster import (
    ADAPTER,
    ADAPTER_NS,
    TRAINER,
    TRAINER_NS,
    Cluster,
    ContainerFacts,
    agent_gauge,
    quantity,
    wait_hpa_scales_the_trainer_to_two,
)
from tests.e2e.harness.install import wait_rollout
from tests.support.waiting import wait_for

CUSTOM = ("v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io")
EXTERNAL = "v1beta1.external.metrics.k8s.io"


def custom_only_overlay_leaves_external_metrics_to_their_owner(cluster: Cluster) -> None:
    """Another server (say KEDA) owns external.metrics.k8s.io before EDL is installed:
    manifests/overlays/custom-only's adapter serves custom.metrics.k8s.io (Available) and
    leaves the external APIService to its owner."""
    foreign = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": EXTERNAL},
        "spec": {
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "insecureSkipTLSVerify": True,
            "service": {"name": "keda-operator-metrics-apiserver", "namespace": "keda"},
        },
    }
    path = cluster.overlays / "foreign-external.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(foreign))
    cluster.kubectl("apply", "-f", str(path))
    try:
        overlay = cluster.adapter_overlay("manifests/overlays/custom-only")
        cluster.kubectl("apply", "-k", str(overlay), timeout_s=60)
        wait_rollout(cluster.api, ADAPTER_NS, ADAPTER, timeout_s=240)
        wait_for(
            lambda: all(cluster.available(n) for n in CUSTOM),
            timeout_s=120,
            what="EDL's custom.metrics.k8s.io APIServices Available",
            describe=lambda: cluster.kubectl("get", "apiservices"),
        )
        owner = cluster.kubectl(
            "get",
            "apiservice",
            EXTERNAL,
            "-o",
            "jsonpath={.spec.service.namespace}/{.spec.service.name}",
        )
        assert owner == "keda/keda-operator-metrics-apiserver"
        listing = cluster.raw("/apis/custom.metrics.k8s.io/v1beta2")
        assert {r["name"] for r in listing["resources"]} >= {"pods/samples_per_second"}
    finally:
        cluster.kubectl("delete", "apiservice", EXTERNAL, "--ignore-not-found")


def manifests_run_and_the_hpa_scales_training(cluster: Cluster) -> ContainerFacts:
    """manifests/base (the adapter) and the digits example (its HPA on per-pod throughput)
    applied with `kubectl apply -k` from EDL's images: the APIServices become Available, the
    adapter runs as the manifest says, the HPA scales the trainer to 2 and both pods train in
    a world of 2 that re-formed under the running job. Returns how the adapter runs."""
    cluster.kubectl("apply", "-k", str(cluster.adapter_overlay("manifests/base")), timeout_s=60)
    wait_rollout(cluster.api, ADAPTER_NS, ADAPTER, timeout_s=240)
    wait_for(
        lambda: all(cluster.available(n) for n in (*CUSTOM, EXTERNAL)),
        timeout_s=120,
        what="all three APIServices Available",
        describe=lambda: cluster.kubectl("get", "apiservices"),
    )
    # The adapter runs as the manifest says: user 65532, read-only root, no capabilities.
    core = client.CoreV1Api(cluster.api)
    pod = core.list_namespaced_pod(ADAPTER_NS).items[0]
    facts = cluster.runtime.facts(pod)
    assert (facts.user, facts.read_only_root, facts.host_network) == ("65532", True, True), facts

    overlay = cluster.trainer_overlay("digits", cluster.images["trainer"])
    cluster.kubectl("apply", "-k", str(overlay), timeout_s=60)
    wait_rollout(cluster.api, TRAINER_NS, TRAINER, timeout_s=300)

    path = (
        f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{TRAINER_NS}"
        "/pods/*/samples_per_second?labelSelector=app%3Dtrainer"
    )

    def training_pods() -> dict[str, float]:
        items = cluster.raw(path)["items"]
        return {i["describedObject"]["name"]: quantity(i["value"]) for i in items}

    wait_for(
        lambda: any(v > 0 for v in training_pods().values()),
        timeout_s=240,
        what="samples_per_second of the trainer through kube-apiserver",
        describe=lambda: cluster.kubectl("get", "pods", "-A", "-o", "wide"),
    )
    # The step time, the other per-pod series a user's HPA may read (was the pod runner's
    # test_agent_pod.py): exported by the agent, served in seconds, above 0.
    step_path = path.replace("samples_per_second", "step_seconds")

    def step_seconds() -> list[float] | None:
        values = [quantity(i["value"]) for i in cluster.raw(step_path)["items"]]
        return values if values and all(v > 0 for v in values) else None

    wait_for(step_seconds, timeout_s=120, what="step_seconds of the trainer above 0")
    wait_hpa_scales_the_trainer_to_two(cluster, "the example's")

    def both_train_in_a_world_of_two() -> bool:
        pods = core.list_namespaced_pod(TRAINER_NS, label_selector="app=trainer").items
        sizes = [agent_gauge(str(p.status.pod_ip), "edl_trainer_world_size") for p in pods]
        rates = training_pods()
        return (
            len(pods) == 2 and sizes == [2.0, 2.0] and len(rates) == 2 and min(rates.values()) > 0
        )

    wait_for(
        both_train_in_a_world_of_two,
        timeout_s=300,
        what="both trainer pods training in a world of 2",
        describe=lambda: f"{training_pods()}\n{cluster.kubectl('get', 'pods', '-n', TRAINER_NS)}",
    )
    # The world changed under a running job (1 -> 2 members): a later generation on both pods.
    pods = core.list_namespaced_pod(TRAINER_NS, label_selector="app=trainer").items
    generations = [agent_gauge(str(p.status.pod_ip), "edl_trainer_generation") for p in pods]
    assert all(g is not None and g >= 2 for g in generations), generations
    return facts
