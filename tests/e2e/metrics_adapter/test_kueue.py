"""The sizer beside Kueue v0.17 on the real control plane: a job waits in its queue, is admitted,
grows to what its ClusterQueue admits and no further.

A Node of 8 CPUs (the pod runner is its kubelet), kube-scheduler, Kueue (its `pod` and
`deployment` integrations, its webhooks called by kube-apiserver) and one sizing adapter with
`--sizing-kueue`, as ServiceAccount `edl-metrics-adapter` with the RBAC of manifests/base and
the component manifests/components/kueue. The trainer Deployment (`kueue.x-k8s.io/queue-name:
user`, workers of 1 CPU, min 1 / max 8, a per-size history that scales linearly to 8, so only
the queue limits it) is scaled by an HPA on `desired_replicas`.

1. The ClusterQueue has no CPU quota: the job's worker is gated by Kueue
   (`kueue.x-k8s.io/admission`), never bound, and the sizer holds the job at its minimum
   (`queue_quota`).
2. The queue's quota becomes 3 CPUs: Kueue admits the worker, it runs; the sizer plans 3
   (what the queue admits), the HPA scales to 3, Kueue admits the 2 new workers and all 3
   run; the plan and the Deployment stay at 3 though the node has room for 8, and no worker
   is left gated.
3. The quota becomes 5: the job grows to 5 and runs 5.
4. A Deployment of higher priority (`preemptionPolicy: Never`) in the same LocalQueue: its pod
   waits in the full queue; the sizer shrinks the job to 4 for it (`protected_demand`), the
   HPA scales it down, Kueue admits the pod into the freed quota (no preemption) and it
   runs; the job stays at 4.
5. That pod goes and the job grows back to 5; a batch Job of the same priority (a Workload
   with no pod until admitted) waits in the queue: the job shrinks to 4 again and Kueue
   admits the Job (unsuspends it).

A second test turns Kueue's preemption on (`preemption.withinClusterQueue: LowerPriority`)
and runs the real elastic agent (as test_sizing does): Kueue admits a workload of higher
priority by evicting one of the job's pod Workloads, and the job shrinks (the world re-forms
without that member, no sample lost or trained twice), its replacement pod is not left
gated, and it grows back once that workload is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from metrics_adapter.sizing.kueue_objects import ADMISSION_GATE, QUEUE_LABEL
from tests.e2e.harness.adapter import AdapterSettings, MetricsAdapter
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import (
    SERVICE_ACCOUNT,
    WorldWatch,
    elastic_container,
    grant_agent_access,
    reap_trainers,
)
from tests.e2e.harness.kueue import MANAGED_LABEL, Kueue
from tests.e2e.harness.nodes import NodeSpec
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.metrics_adapter.test_sizing import (
    ADAPTER_NS,
    HISTORY,
    SIZING_ARGS,
    TRAIN_ARGS,
    SizingAdapters,
    Timeline,
    _partial_ledger_problems,
    adapter_kubeconfig,
    linear_history,
    sizing_hpa,
    sleeper,
    trainer_deployment,
)
from tests.support.kustomize import ROOT
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.kueue]

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
FLAVOR = "edl-e2e-default"
CLUSTER_QUEUE = "edl-e2e-team"
LOCAL_QUEUE = "user"
SLEEPER = {
    "name": "worker",
    "image": "edl-e2e.invalid/sleeper:local",
    "command": ["python", "-c", "import time; time.sleep(3600)"],
}


@pytest.fixture(scope="module")
def sizing_beside_kueue(
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    kubectl: Kubectl,
    metrics_adapter: MetricsAdapter,
    kueue: Kueue,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SizingAdapters]:
    """kube-scheduler and a sizing adapter with --sizing-kueue, registered behind the APIServices,
    with the RBAC of manifests/base and manifests/components/kueue."""
    control_plane.start_scheduler()
    tmp = tmp_path_factory.mktemp("kueue-sizing")
    rel = Path(os.path.relpath(ROOT, tmp)).as_posix()
    (tmp / "kustomization.yaml").write_text(
        f"resources: [{rel}/manifests/base]\ncomponents: [{rel}/manifests/components/kueue]\n"
    )
    kubeconfig = adapter_kubeconfig(kubectl, control_plane, tmp / "adapter.kubeconfig", str(tmp))
    try:
        client.CoreV1Api(kube_api).delete_namespaced_config_map(HISTORY, ADAPTER_NS)
    except client.ApiException as e:
        if e.status != 404:
            raise
    adapter = MetricsAdapter(
        control_plane,
        AdapterSettings(
            name="sizing-kueue", kubeconfig=kubeconfig, extra_args=[*SIZING_ARGS, "--sizing-kueue"]
        ),
    )
    try:
        adapter.start()
        adapter.register()
        adapter.wait_available(timeout_s=60)
        yield SizingAdapters(adapter, adapter, control_plane)
    finally:
        adapter.stop()
        control_plane.stop_scheduler()
        metrics_adapter.register()  # the other e2e tests' adapter serves again
        metrics_adapter.wait_available(timeout_s=60)


def _queues(
    api: client.ApiClient,
    namespace: str,
    cpu: str,
    name: str = CLUSTER_QUEUE,
    preemption: dict[str, str] | None = None,
) -> client.CustomObjectsApi:
    """The ResourceFlavor (once), ClusterQueue `name` (``cpu`` CPUs, Kueue's `preemption`
    policy if given, else its default: none) and LocalQueue `user` in `namespace`."""
    custom = client.CustomObjectsApi(api)
    api_version = f"{GROUP}/{VERSION}"
    flavor: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR},
    }
    limits = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "16Gi"}]
    cluster_queue: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": FLAVOR, "resources": limits}],
                }
            ],
            **({"preemption": preemption} if preemption else {}),
        },
    }
    local: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE},
        "spec": {"clusterQueue": name},
    }
    try:  # one flavor for the module's ClusterQueues
        custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", flavor)
    except client.ApiException as e:
        if e.status != 409:
            raise
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", local)
    return custom


def _cluster_queue(custom: client.CustomObjectsApi, name: str = CLUSTER_QUEUE) -> dict[str, Any]:
    cq = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
    assert isinstance(cq, dict)
    return cq


def _set_cpu_quota(custom: client.CustomObjectsApi, cpu: str) -> None:
    cq = _cluster_queue(custom)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = cpu
    custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", CLUSTER_QUEUE, cq)


def _workers(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    """Each live worker pod -> "gated", "pending" (admitted, not bound) or "bound"."""
    out: dict[str, str] = {}
    for pod in core.list_namespaced_pod(namespace, label_selector="app=trainer").items:
        if pod.metadata.deletion_timestamp:
            continue
        gates = [g.name for g in pod.spec.scheduling_gates or []]
        out[str(pod.metadata.name)] = (
            "gated" if ADMISSION_GATE in gates else "bound" if pod.spec.node_name else "pending"
        )
    return out


@contextlib.contextmanager
def _lowest_served(sizing: SizingAdapters, namespace: str, job: str) -> Iterator[list[int]]:
    """The lowest value the sizer serves for `job` while the block runs (sampled every 0.2 s,
    for 300 s at most): the list holds it once the block is done."""
    lowest: list[int] = []
    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        for _ in range(1500):
            served = sizing.served(sizing.a, namespace, job)
            if served is not None:
                seen.append(served)
            if stop.wait(0.2):
                return

    sampler = threading.Thread(target=sample, name="lowest-served", daemon=True)
    sampler.start()
    try:
        yield lowest
    finally:
        stop.set()
        sampler.join(timeout=10)
        lowest.append(min(seen, default=-1))


def _shrinks(core: client.CoreV1Api, namespace: str, job: str) -> list[tuple[int, str]]:
    """Every size the sizer's `SizingShrink` Events on `job` name ("shrank to N: ...") since
    it was created, with the message: the durable record of each shrink it decided
    (`kubectl get events`), however briefly served."""
    events = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={job},reason=SizingShrink"
    ).items
    return sorted(
        (int(m.group(1)), str(e.message))
        for e in events
        if (m := re.match(r"shrank to (\d+):", e.message or ""))
    )


def _batch_job(name: str, priority_class: str) -> dict[str, Any]:
    """A batch Job of one 1-CPU pod in LocalQueue `user` (Kueue suspends it until admitted;
    the harness runs no Job controller, so admission is all it shows)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": priority_class,
                    "containers": [{**SLEEPER, "resources": {"requests": {"cpu": "1"}}}],
                }
            },
        },
    }


def _ready(apps: client.AppsV1Api, namespace: str, name: str) -> int:
    return int(apps.read_namespaced_deployment(name, namespace).status.ready_replicas or 0)


def _reserved_cpu(custom: client.CustomObjectsApi, name: str = CLUSTER_QUEUE) -> str:
    cq = _cluster_queue(custom, name)
    for flavor in (cq.get("status") or {}).get("flavorsReservation") or []:
        for r in flavor.get("resources") or []:
            if r["name"] == "cpu":
                return str(r.get("total"))
    return "0"


@pytest.mark.parametrize("kubelet_nodes", [(NodeSpec("roomy", cpu="8", memory="16Gi"),)],
                         ids=["1x8cpu"])  # fmt: skip
def test_a_job_waits_in_its_queue_is_admitted_and_grows_to_the_queues_quota_and_no_further(
    sizing_beside_kueue: SizingAdapters, e2e_ns: E2ENamespace
) -> None:
    sizing, ns, api = sizing_beside_kueue, e2e_ns.name, e2e_ns.api
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    autoscaling = client.AutoscalingV2Api(api)
    key, value = MANAGED_LABEL
    core.patch_namespace(ns, {"metadata": {"labels": {key: value}}})
    custom = _queues(api, ns, cpu="0")
    linear_history(api, f"{ns}/queued")
    deployment = trainer_deployment("queued", "queued", 1, SLEEPER, 1, 8)
    deployment["metadata"]["labels"][QUEUE_LABEL] = LOCAL_QUEUE
    apps.create_namespaced_deployment(ns, as_body(deployment))
    autoscaling.create_namespaced_horizontal_pod_autoscaler(
        ns, as_body(sizing_hpa("queued", "queued", 8, "0"))
    )

    def decision() -> dict[str, Any]:
        page = sizing.debug_page(sizing.a)
        found = [j for j in page["plan"]["jobs"] if j["job"] == f"{ns}/queued"]
        return found[0] if found else {}

    def running(n: int, why: str) -> None:
        wait_for(
            lambda: (
                list(_workers(core, ns).values()) == ["bound"] * n
                and int(apps.read_namespaced_deployment("queued", ns).status.ready_replicas or 0)
                == n
            ),
            timeout_s=180,
            what=f"{n} workers running, {why}",
            describe=lambda: f"workers {_workers(core, ns)}; decision {json.dumps(decision())}",
        )

    # 1. no CPU quota: the worker waits in the queue, gated, and the sizer plans no more
    wait_for(
        lambda: list(_workers(core, ns).values()) == ["gated"],
        timeout_s=60,
        what="the worker gated by Kueue's admission",
        describe=lambda: f"workers {_workers(core, ns)}",
    )
    wait_for(
        lambda: decision().get("limitedBy") == "queue_quota",
        timeout_s=60,
        what="the sizer stopping the job at its queue",
        describe=lambda: json.dumps(decision()),
    )
    waiting = decision()
    print(f"waiting in the queue: {json.dumps(waiting)}")
    assert waiting["desired"] == 1
    assert f"ClusterQueue {CLUSTER_QUEUE} admits no more workers" in waiting["message"]
    for _ in range(3):  # the node has room: only the queue holds it back
        time.sleep(1)
        assert set(_workers(core, ns).values()) == {"gated"}, _workers(core, ns)
        assert sizing.served(sizing.a, ns, "queued") == 1

    # 2. 3 CPUs: admitted, grows to 3 and stays there
    _set_cpu_quota(custom, "3")
    running(3, "admitted by Kueue, bound and running")
    grown = decision()
    print(f"under a ClusterQueue of 3 CPUs: {json.dumps(grown)}")
    assert (grown["desired"], grown["limitedBy"]) == (3, "queue_quota")
    for _ in range(5):  # the 1 s rounds never plan past the queue; no worker waits in it
        time.sleep(1)
        assert sizing.served(sizing.a, ns, "queued") == 3, json.dumps(decision())
        assert apps.read_namespaced_deployment("queued", ns).spec.replicas == 3
        assert "gated" not in _workers(core, ns).values(), _workers(core, ns)
    assert _reserved_cpu(custom) == "3"

    # 3. 5 CPUs: it grows to 5
    _set_cpu_quota(custom, "5")
    running(5, "once the ClusterQueue admits 5 CPUs")
    assert sizing.served(sizing.a, ns, "queued") == 5

    def gives_one_worker(create: Callable[[], object], admitted: Callable[[], bool],
                         what: str) -> None:  # fmt: skip
        """`create` a workload the full queue leaves waiting: the job gives it one worker
        (never two, sampled) and Kueue admits it."""
        with _lowest_served(sizing, ns, "queued") as lowest:
            create()
            wait_for(
                admitted,
                timeout_s=180,
                what=f"{what} in the room the job gave up",
                describe=lambda: f"workers {_workers(core, ns)}; decision {json.dumps(decision())}",
            )
            running(4, f"one given up to {what}")
        assert lowest == [4], f"one worker given up for {what}, never two"
        shrinks = _shrinks(core, ns, "queued")
        assert shrinks and min(n for n, _ in shrinks) == 4, (
            f"the job's shrinks, every step up to {what}: {shrinks}"
        )

    # 4. a workload of higher priority waits in the full queue: the job gives it a worker
    urgent_class = f"edl-e2e-kueue-urgent-{ns}"
    scheduling = client.SchedulingV1Api(api)
    scheduling.create_priority_class(
        as_body({"metadata": {"name": urgent_class}, "value": 1000, "preemptionPolicy": "Never"})
    )
    try:
        urgent = sleeper("urgent", urgent_class)
        urgent["metadata"]["labels"] = {QUEUE_LABEL: LOCAL_QUEUE}
        gives_one_worker(
            lambda: apps.create_namespaced_deployment(ns, as_body(urgent)),
            lambda: _ready(apps, ns, "urgent") == 1,
            "the urgent pod (admitted by Kueue and running)",
        )
        shrunk = decision()
        print(f"beside the urgent workload: {json.dumps(shrunk)}")
        assert shrunk["desired"] == 4
        wait_for(  # past its hold-off, the queue holds it: no growth back into the pod's quota
            lambda: decision().get("limitedBy") == "queue_quota",
            timeout_s=60,
            what="the job held at 4 by its queue",
            describe=lambda: json.dumps(decision()),
        )
        for _ in range(3):
            time.sleep(1)
            assert sizing.served(sizing.a, ns, "queued") == 4, json.dumps(decision())
            assert apps.read_namespaced_deployment("queued", ns).spec.replicas == 4
        assert _reserved_cpu(custom) == "5"

        # 5. the pod goes, the job grows back to 5; a batch Job of the same priority then
        # waits in the queue (a Workload without pods): the job gives it a worker too
        apps.delete_namespaced_deployment("urgent", ns)
        running(5, "back into the quota the urgent pod left")
        batch_v1 = client.BatchV1Api(api)
        gives_one_worker(
            lambda: batch_v1.create_namespaced_job(ns, as_body(_batch_job("report", urgent_class))),
            lambda: batch_v1.read_namespaced_job("report", ns).spec.suspend is False,
            "the batch Job (admitted by Kueue: unsuspended)",
        )
        shrunk = decision()
        print(f"beside the batch Job: {json.dumps(shrunk)}")
        assert sizing.served(sizing.a, ns, "queued") == 4
        batch_v1.delete_namespaced_job("report", ns, propagation_policy="Background")
    finally:
        scheduling.delete_priority_class(urgent_class)
    autoscaling.delete_namespaced_horizontal_pod_autoscaler("queued", ns)
    apps.delete_namespaced_deployment("queued", ns)
    wait_for(  # while Kueue runs: it lifts the finalizer it put on each pod
        lambda: not core.list_namespaced_pod(ns).items,
        timeout_s=90,
        what="the workers gone",
    )
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors


def _kueue_events(core: client.CoreV1Api, namespace: str) -> list[tuple[str, str, str, str]]:
    """(kind, name, reason, message) of each Event on a Workload in `namespace`, and of each
    Event on a Pod that Kueue wrote (it stopped or preempted it), oldest first."""
    events = sorted(
        core.list_namespaced_event(namespace).items,
        key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp),
    )
    return [
        (str(o.kind), str(o.name), str(e.reason), str(e.message))
        for e in events
        if (o := e.involved_object).kind == "Workload"
        or (o.kind == "Pod" and e.reason in ("Stopped", "Preempted", "Evicted"))
    ]


PREEMPTING_QUEUE = "edl-e2e-preempting"


@pytest.mark.parametrize("kubelet_nodes", [(NodeSpec("roomy", cpu="8", memory="16Gi"),)],
                         ids=["1x8cpu"])  # fmt: skip
def test_kueues_preemption_shrinks_the_elastic_job_which_grows_back_afterwards(
    sizing_beside_kueue: SizingAdapters,
    e2e_ns: E2ENamespace,
    kubectl: Kubectl,
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    """Kueue preempts one of the job's pod Workloads for a workload of higher priority.

    A ClusterQueue of 3 CPUs with `preemption.withinClusterQueue: LowerPriority` and the real
    elastic digits job (the agent around the trainer, as in test_sizing, min 1 / max 4) in it:
    it grows on measured throughput to 3, what the queue admits. A Deployment of higher
    priority (a plain priority class: it may preempt) joins the queue; Kueue admits it by
    evicting one of the job's pod Workloads, which deletes that pod. Its agent leaves the
    world like any member being deleted: the other two re-form and train on (the sample
    ledger: no sample lost or trained twice). The ReplicaSet's replacement pod waits, gated,
    in the full queue; the sizer plans 2 (what the queue admits), the HPA scales to 2 and the
    ReplicaSet removes that gated pod first: nothing is left waiting. When the high-priority
    Deployment goes, the job grows back to 3.
    """
    ns, api = e2e_ns.name, e2e_ns.api
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    autoscaling, scheduling = client.AutoscalingV2Api(api), client.SchedulingV1Api(api)
    key, value = MANAGED_LABEL
    core.patch_namespace(ns, {"metadata": {"labels": {key: value}}})
    custom = _queues(
        api, ns, cpu="3", name=PREEMPTING_QUEUE, preemption={"withinClusterQueue": "LowerPriority"}
    )
    urgent_class = f"edl-e2e-kueue-preemptor-{ns}"
    scheduling.create_priority_class(as_body({"metadata": {"name": urgent_class}, "value": 1000}))
    agent_kubeconfig = grant_agent_access(
        ns, api, kubectl, control_plane, tmp_path / "agent.kubeconfig"
    )
    container = elastic_container(
        tmp_path, agent_kubeconfig, "process", "examples.train_digits_elastic", TRAIN_ARGS
    )
    container["env"].append({"name": "EDL_TRAINER_PORTS", "value": "auto"})
    deployment = trainer_deployment("trainer", "digits", 1, container, 1, 4, SERVICE_ACCOUNT)
    deployment["metadata"]["labels"][QUEUE_LABEL] = LOCAL_QUEUE
    apps.create_namespaced_deployment(ns, as_body(deployment))
    world = WorldWatch(core, ns, tmp_path / "ledger")
    timeline = Timeline(core, apps, ns, "trainer", "digits", world, sizing_beside_kueue)
    timeline.record_now()
    autoscaling.create_namespaced_horizontal_pod_autoscaler(
        ns, as_body(sizing_hpa("trainer", "digits", 4, "0"))
    )
    sizing = sizing_beside_kueue
    logs = e2e_ns.runner.log_tails

    def decision() -> dict[str, Any]:
        page = sizing.debug_page(sizing.a)
        found = [j for j in page["plan"]["jobs"] if j["job"] == f"{ns}/trainer"]
        return found[0] if found else {}

    def story() -> str:
        """What a failure shows: the timeline, the pods, the plan and what Kueue did."""
        kueue_said = "\n".join(f"  {k}/{n} {r}: {m}" for k, n, r, m in _kueue_events(core, ns))
        return (
            f"{timeline.table()}\nworkers {_workers(core, ns)}\n"
            f"decision {json.dumps(decision())}\nKueue's events:\n{kueue_said}\n{logs()}"
        )

    def settled_at(n: int, what: str, timeout_s: float) -> None:
        """A generation of `n` members training, `n` workers bound, none gated or waiting,
        the Deployment at `n`."""
        wait_for(
            lambda: world.training_at(n, after=0, steps=4) is not None,
            timeout_s=timeout_s,
            what=f"a world of {n} training ({what})",
            describe=story,
        )
        wait_for(
            lambda: (
                list(_workers(core, ns).values()) == ["bound"] * n
                and apps.read_namespaced_deployment("trainer", ns).spec.replicas == n
            ),
            timeout_s=120,
            what=f"{n} workers bound, the Deployment at {n} and none waiting ({what})",
            describe=story,
        )

    timeline.start()
    try:
        # 1. the job grows on measured throughput to what the queue admits
        settled_at(3, "grown to the ClusterQueue's 3 CPUs", timeout_s=360)
        print(f"at the queue's quota: {json.dumps(decision())}")
        before = set(_workers(core, ns))

        # 2. a Deployment of higher priority: Kueue preempts one of the job's pods
        urgent = sleeper("urgent", urgent_class)
        urgent["metadata"]["labels"] = {QUEUE_LABEL: LOCAL_QUEUE}
        apps.create_namespaced_deployment(ns, as_body(urgent))
        created = time.monotonic() - world.started
        wait_for(lambda: _ready(apps, ns, "urgent") == 1, timeout_s=120,
                 what="the urgent pod admitted and running", describe=story)  # fmt: skip
        settled_at(2, "one worker preempted for the urgent pod", timeout_s=180)
        preempted = [
            n for _, n, r, _m in _kueue_events(core, ns) if r == "Preempted" and "trainer" in n
        ]
        reformed = next(t for t, _, n in world.history if t >= created and n == 2)
        print(f"Kueue preempted: {preempted}; workers before {sorted(before)}, "
              f"after {sorted(_workers(core, ns))}; a world of 2 seen "
              f"{reformed - created:.1f} s after the urgent Deployment was created")  # fmt: skip
        assert len(preempted) == 1, f"Kueue made room by preempting one worker:\n{story()}"
        gone = {w for w in before if preempted[0].startswith(f"pod-{w}-")}
        assert len(gone) == 1 and not gone & set(_workers(core, ns)), (preempted, story())
        wait_for(  # what the queue admits now, the urgent pod holding the worker's quota
            lambda: (decision().get("desired"), decision().get("limitedBy")) == (2, "queue_quota"),
            timeout_s=60,
            what="the sizer planning 2, limited by the queue",
            describe=story,
        )
        shrunk = decision()
        print(f"beside the urgent pod: {json.dumps(shrunk)}")
        for _ in range(5):  # held at 2 by the queue; the replacement pod does not come back
            time.sleep(1)
            assert sizing.served(sizing.a, ns, "digits") == 2, story()
            assert list(_workers(core, ns).values()) == ["bound"] * 2, story()
        assert _reserved_cpu(custom, PREEMPTING_QUEUE) == "3"

        # 3. the urgent pod goes: the job grows back
        apps.delete_namespaced_deployment("urgent", ns)
        gen_at_2 = world.world()[0]
        wait_for(
            lambda: world.training_at(3, after=gen_at_2, steps=4) is not None,
            timeout_s=240,
            what="the job grown back to 3",
            describe=story,
        )
        settled_at(3, "grown back into the freed quota", timeout_s=60)
    finally:
        timeline.stop()
        print(f"\n=== Kueue preemption timeline (namespace {ns}) ===\n{timeline.table()}")
        print(f"world history (s, generation, size): {world.history}")
        print("Kueue's events:\n" + "\n".join(
            f"  {k}/{n} {r}: {m}" for k, n, r, m in _kueue_events(core, ns)))  # fmt: skip
        try:
            autoscaling.delete_namespaced_horizontal_pod_autoscaler("trainer", ns)
            kubectl("-n", ns, "scale", "deployment/trainer", "--replicas=0")
        finally:
            reap_trainers(tmp_path, "examples.train_digits_elastic")
            scheduling.delete_priority_class(urgent_class)

    replicas = [
        r[1] for i, r in enumerate(timeline.rows) if i == 0 or timeline.rows[i - 1][1] != r[1]
    ]
    assert replicas[-3:] == [3, 2, 3] and set(replicas) <= {1, 2, 3}, timeline.table()
    assert world.sizes[-3:] == [3, 2, 3] and set(world.sizes) <= {1, 2, 3}, world.history
    problems, epochs = _partial_ledger_problems(tmp_path / "ledger")
    assert problems == [], problems
    assert epochs >= 1, "not one epoch completed: the test says nothing about exactly-once"
    wait_for(  # while Kueue runs: it lifts the finalizer it put on each pod
        lambda: not core.list_namespaced_pod(ns, label_selector="app=trainer").items,
        timeout_s=90,
        what="the workers gone",
    )
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors
