"""Resource-aware sizing on the real control plane: the real scheduler, the real HPA, two adapters.

Three Node objects of 1 CPU each (the pod runner is their kubelet) and a trainer Deployment
(`edl.paddlepaddle.org/job: digits`, workers of 1 CPU, min 1 / max 3 workers) running the
real elastic agent around the digits example, whose simulated compute per sample makes
throughput grow with workers. An HPA on the External metric `desired_replicas` (AverageValue
1, per-HPA tolerance 0) applies what the sizer decides. Two adapter replicas run the sizer,
as ServiceAccount `edl-metrics-adapter` with exactly the RBAC of manifests/base, and share
the per-size history in ConfigMap `edl-system/edl-sizing-history`.

1. The job grows into the free room: 1 -> 2 (exploration is capped at twice the largest size
   measured), then, once size 2 has been measured, -> 3.
2. A Deployment of higher priority (1 CPU, `preemptionPolicy: Never`) arrives: its pod is
   Pending (the scheduler finds no room), the sizer shrinks the job to 2 at once, the HPA
   scales it down, and the scheduler binds the pod into the freed room.
3. The APIService is switched to the other adapter replica; the high-priority Deployment is
   deleted and the job grows back to 3, decided by the second replica.

Training goes on throughout: the sample ledger shows every sample of each completed epoch
exactly once, none twice in the current one, and restores never go back. Both replicas
serve the same value at every settled point. The timeline (replicas, pending pods, world
size, both replicas' values) is printed.

A second test shows the HPA tolerance trap on the real 1.35 controller: a job at 10 workers
the sizer wants at 11 stays at 10 under the default 10 % tolerance, and moves once the HPA
sets `behavior.scaleUp.tolerance: "0"`.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from kubernetes import client

from agent.trainer.ledger import verify
from edl_common.quantity import parse_quantity
from edl_sizing import SizeHistory
from metrics_adapter.sizing.history_configmap import ConfigMapHistoryStore
from metrics_adapter.sizing.kube_objects import JOB_LABEL, MAX_WORKERS, MIN_WORKERS
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
from tests.e2e.harness.hpa_diff import read_syncs
from tests.e2e.harness.nodes import NodeSpec
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import events_for
from tests.support.digits_job import NUM_TRAIN
from tests.support.kustomize import render
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

ADAPTER_NS = "edl-system"
ADAPTER_SA = "edl-metrics-adapter"
HISTORY = "edl-sizing-history"
HOLD_OFF_S = 15
SIZING_ARGS = [
    "--sizing",
    "--sizing-interval=1s",
    "--sizing-history-interval=2s",
    f"--sizing-hold-off={HOLD_OFF_S}s",
    "--sizing-payback=120s",
    f"--sizing-history-namespace={ADAPTER_NS}",
]
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
# The job cannot end within the test whatever the machine's speed: its simulated compute
# alone (0.012 s a sample, 64 a step, split over at most 3 workers: 22 samples, 0.264 s, on
# the largest share) is 200 epochs x 23 steps x 0.264 s = 1,214 s at 3 workers, twice the
# test's whole timeout. No gate here: a held job would measure no throughput, and the sizer
# decides on throughput.
TRAIN_ARGS = ["--epochs", "200", "--global-batch", "64", "--seed", "3", "--sample-sleep", "0.012"]
"""Simulated compute of 12 ms per sample of a rank's share: 0.77 s a step alone, 0.38 s at 2,
0.26 s at 3, plus the step's real work `o` (framework, all-reduce; more on a loaded machine).
The growth this test expects rests on measured throughput, so on the machine: 3 workers are
(0.38 + o) / (0.26 + o) times faster than 2 (x 1.4 at o = 0.05 s, x 1.2 at 0.4 s, x 1.1 at
1 s), and a growth must pay back the measured rescale pause within --sizing-payback (120 s:
x 1.12 or more for a 13 s pause). The sleep is added, not a floor, so the ratio shrinks with
load but never reaches 1. The job never finishes during the test (it is stopped at the end)."""
WORKER = {"cpu": "1", "memory": "256Mi"}


# ---- the two sizing adapters, as the manifests' ServiceAccount --------------------------------


@dataclass
class SizingAdapters:
    a: MetricsAdapter
    b: MetricsAdapter
    cp: ControlPlane

    def served(self, adapter: MetricsAdapter, namespace: str, job: str) -> int | None:
        """What `adapter` serves as desired_replicas for `job` (None: no item, or an error)."""
        assert self.cp.pki is not None
        try:
            r = requests.get(
                f"{adapter.url}{EXTERNAL}/namespaces/{namespace}/desired_replicas",
                params={"labelSelector": f"{JOB_LABEL}={job}"},
                cert=(str(self.cp.pki.admin.cert), str(self.cp.pki.admin.key)),
                verify=str(self.cp.pki.ca.cert),
                timeout=5,
            )
            items = r.json().get("items") or []
        except (requests.RequestException, ValueError):
            return None
        if r.status_code != 200 or len(items) != 1:
            return None
        return int(parse_quantity(items[0]["value"]))

    def debug_page(self, adapter: MetricsAdapter) -> dict[str, Any]:
        """`/debug/sizing` of `adapter` (the plan it serves)."""
        assert self.cp.pki is not None
        r = requests.get(
            f"{adapter.url}/debug/sizing",
            cert=(str(self.cp.pki.admin.cert), str(self.cp.pki.admin.key)),
            verify=str(self.cp.pki.ca.cert),
            timeout=5,
        )
        r.raise_for_status()
        page: dict[str, Any] = r.json()
        return page

    def both(self, namespace: str, job: str) -> tuple[int | None, int | None]:
        return self.served(self.a, namespace, job), self.served(self.b, namespace, job)


def _apply(kubectl: Kubectl, docs: list[dict[str, Any]]) -> None:
    done = subprocess.run(
        [kubectl.binary, f"--kubeconfig={kubectl.kubeconfig}", "apply", "-f", "-"],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def adapter_kubeconfig(
    kubectl: Kubectl, cp: ControlPlane, path: Path, manifests: str = "manifests/base"
) -> Path:
    """The manifests' RBAC for the adapter's ServiceAccount, and a kubeconfig with its token."""
    assert cp.pki is not None
    rbac = [
        d
        for d in render(manifests)
        if d["kind"]
        in (
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        )
    ]
    _apply(kubectl, rbac)
    token = kubectl("create", "token", ADAPTER_SA, "-n", ADAPTER_NS, "--duration=2h").strip()
    cluster = {"server": cp.server, "certificate-authority": str(cp.pki.ca.cert)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": ADAPTER_SA, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": ADAPTER_SA}}],
        "current-context": "e2e",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def sizing(
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    kubectl: Kubectl,
    metrics_adapter: MetricsAdapter,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SizingAdapters]:
    """kube-scheduler, and two sizing adapters (A registered behind the APIServices)."""
    control_plane.start_scheduler()
    kubeconfig = adapter_kubeconfig(
        kubectl, control_plane, tmp_path_factory.mktemp("sizing") / "adapter.kubeconfig"
    )
    _delete_history(kube_api)
    adapters = [
        MetricsAdapter(
            control_plane,
            AdapterSettings(name=f"sizing-{x}", kubeconfig=kubeconfig, extra_args=SIZING_ARGS),
        )
        for x in "ab"
    ]
    try:
        for adapter in adapters:
            adapter.start()
        adapters[0].register()
        adapters[0].wait_available(timeout_s=60)
        yield SizingAdapters(adapters[0], adapters[1], control_plane)
    finally:
        for adapter in adapters:
            adapter.stop()
        control_plane.stop_scheduler()
        metrics_adapter.register()  # the other e2e tests' adapter serves again
        metrics_adapter.wait_available(timeout_s=60)


def _decision(sizing: SizingAdapters, job: str) -> dict[str, Any]:
    """Adapter A's decision for `job` as its debug page shows it (with the page's other jobs)."""
    page = sizing.debug_page(sizing.a)
    (decision,) = [j for j in page["plan"]["jobs"] if j["job"] == job]
    others = [f"{j['job']}: {j['current']}->{j['desired']}" for j in page["plan"]["jobs"]]
    return {**decision, "allJobs": others}


def linear_history(api: client.ApiClient, job: str, up_to: int = 8) -> None:
    """The shared history says `job` (``namespace/name``) scales linearly to `up_to` workers,
    as if it had trained at every size: only capacity (or a quota, or a queue) limits it."""

    def linear(h: SizeHistory) -> bool:
        for size in range(1, up_to + 1):
            h.observe(job, size, 100.0 * size, time.time())
        return True

    ConfigMapHistoryStore(api, ADAPTER_NS, HISTORY).update(linear)


def _delete_history(api: client.ApiClient) -> None:
    try:
        client.CoreV1Api(api).delete_namespaced_config_map(HISTORY, ADAPTER_NS)
    except client.ApiException as e:
        if e.status != 404:
            raise


# ---- objects of the scenario -------------------------------------------------------------------


def trainer_deployment(name: str, job: str, replicas: int, container: dict[str, Any],
                       min_w: int, max_w: int, service_account: str | None = None,
                       ) -> dict[str, Any]:  # fmt: skip
    labels = {"app": "trainer", "job": name}
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{**container, "resources": {"requests": WORKER}}],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": {**labels, JOB_LABEL: job},
            "annotations": {MIN_WORKERS: str(min_w), MAX_WORKERS: str(max_w)},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def sizing_hpa(name: str, job: str, max_r: int, tolerance: str | None) -> dict[str, Any]:
    behavior: dict[str, Any] = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    if tolerance is not None:
        behavior["scaleUp"] = {"tolerance": tolerance}
        behavior["scaleDown"]["tolerance"] = tolerance
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": max_r,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": "desired_replicas",
                            "selector": {"matchLabels": {JOB_LABEL: job}},
                        },
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            "behavior": behavior,
        },
    }


def sleeper(name: str, priority_class: str) -> dict[str, Any]:
    """A Deployment of one 1-CPU pod of higher priority (never preempts: the sizer makes room)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": priority_class,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "web",
                            "image": "edl-e2e.invalid/sleeper:local",
                            "command": ["python", "-c", "import time; time.sleep(3600)"],
                            "resources": {"requests": WORKER},
                        }
                    ],
                },
            },
        },
    }


# ---- the timeline ------------------------------------------------------------------------------


@dataclass
class Timeline:
    """Samples, every second: replicas, pending pods, world size, both replicas' values."""

    core: client.CoreV1Api
    apps: client.AppsV1Api
    namespace: str
    deployment: str
    job: str
    world: WorldWatch
    adapters: SizingAdapters
    rows: list[tuple[float, int, int, int, int, int, int | None, int | None]] = field(
        default_factory=list
    )
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Serialises reads of `world` (its history is appended to by whoever reads)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def record_now(self) -> None:
        """One sample now, on the caller's thread: the state before anything can act on it."""
        self.rows.append(self.sample())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sizing-timeline", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.rows.append(self.sample())
            except Exception as e:  # a failed poll is a gap in the table, not a failure
                self.errors.append(repr(e))

    def sample(self) -> tuple[float, int, int, int, int, int, int | None, int | None]:
        d = self.apps.read_namespaced_deployment(self.deployment, self.namespace)
        pods = self.core.list_namespaced_pod(self.namespace).items
        pending = len([p for p in pods if not p.spec.node_name and p.status.phase == "Pending"])
        gen, size = self.world_now()
        a, b = self.adapters.both(self.namespace, self.job)
        t = round(time.monotonic() - self.started, 1)
        return (
            t,
            int(d.spec.replicas or 0),
            int(d.status.ready_replicas or 0),
            pending,
            size,
            gen,
            a,
            b,
        )

    def world_now(self) -> tuple[int, int]:
        with self.lock:
            return self.world.world()

    def table(self) -> str:
        lines = ["  t(s)  replicas  ready  pending  world(gen)  adapter-a  adapter-b"]
        last = None
        for row in self.rows:
            key = row[1:]
            if key == last:
                continue  # print changes only
            last = key
            t, replicas, ready, pending, size, gen, a, b = row
            lines.append(
                f"{t:6.1f}  {replicas:8d}  {ready:5d}  {pending:7d}  {size:4d} ({gen:3d})  "
                f"{a if a is not None else '-':>9}  {b if b is not None else '-':>9}"
            )
        return "\n".join(lines)


def _partial_ledger_problems(ledger: Path) -> tuple[list[str], int]:
    """Exactly-once for a job stopped mid-training: every completed epoch has every sample
    once, the epoch in progress none twice, restores never go back."""
    report = verify(ledger)
    epochs = sorted(report.per_epoch)
    problems = []
    for epoch in epochs[:-1]:
        counts = report.per_epoch[epoch]
        missing = NUM_TRAIN - len(counts)
        twice = [i for i, c in counts.items() if c > 1]
        if missing or twice:
            problems.append(f"epoch {epoch}: {missing} missing, {len(twice)} repeated")
    if epochs and any(c > 1 for c in report.per_epoch[epochs[-1]].values()):
        problems.append(f"epoch {epochs[-1]} (in progress): a sample trained twice")
    restores = [report.restores[g] for g in report.generations]
    if restores != sorted(restores):
        problems.append(f"restored step went back: {restores}")
    if epochs != list(range(len(epochs))):
        problems.append(f"epochs {epochs} are not 0..n")
    return problems, len(epochs) - 1


# ---- the tests ---------------------------------------------------------------------------------

THREE_NODES = (NodeSpec("node-1", cpu="1", memory="4Gi"), NodeSpec("node-2", cpu="1", memory="4Gi"),
               NodeSpec("node-3", cpu="1", memory="4Gi"))  # fmt: skip


@pytest.mark.parametrize("kubelet_nodes", [THREE_NODES], ids=["3x1cpu"])
def test_job_grows_into_free_room_gives_it_back_and_grows_again(
    sizing: SizingAdapters,
    e2e_ns: E2ENamespace,
    kubectl: Kubectl,
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    ns, api = e2e_ns.name, e2e_ns.api
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    urgent_class = f"edl-e2e-urgent-{ns}"
    client.SchedulingV1Api(api).create_priority_class(
        as_body({"metadata": {"name": urgent_class}, "value": 1000, "preemptionPolicy": "Never"})
    )
    agent_kubeconfig = grant_agent_access(
        ns, api, kubectl, control_plane, tmp_path / "agent.kubeconfig"
    )
    # Trainers restart at each rescale: Paddle 3.3.1's in-process re-init aborts in libuv
    # (TCPStore on a new master port) on a second growth in a row; the agent's own e2e test
    # covers the in-process path on 1 -> 3 -> 2 -> 1.
    container = elastic_container(
        tmp_path, agent_kubeconfig, "process", "examples.train_digits_elastic", TRAIN_ARGS
    )
    # All pods share the host's network namespace here: free trainer ports, not 36543/36544.
    container["env"].append({"name": "EDL_TRAINER_PORTS", "value": "auto"})
    apps.create_namespaced_deployment(
        ns, as_body(trainer_deployment("trainer", "digits", 1, container, 1, 3, SERVICE_ACCOUNT))
    )
    world = WorldWatch(core, ns, tmp_path / "ledger")
    timeline = Timeline(core, apps, ns, "trainer", "digits", world, sizing)
    # The first row is the Deployment as created, before the HPA exists: on a fast machine the
    # HPA scales 1 -> 2 within the timeline's first second (CI saw a first row of 2).
    timeline.record_now()
    autoscaling = client.AutoscalingV2Api(api)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(
        ns, as_body(sizing_hpa("trainer", "digits", 3, "0"))
    )
    stored = control_plane.request(
        "GET", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/trainer"
    ).json()
    assert stored["spec"]["behavior"]["scaleUp"]["tolerance"] == "0"  # kept by the 1.35 server

    logs = e2e_ns.runner.log_tails
    checkpoints: list[str] = []

    def training_at(size: int, steps: int = 4) -> int | None:
        gen, n = timeline.world_now()
        return gen if n == size and world.steps_in(gen) >= steps else None

    def settled(expected: int, what: str) -> None:
        """Both replicas serve `expected` (polled: they decide on their own clocks)."""
        wait_for(
            lambda: sizing.both(ns, "digits") == (expected, expected),
            timeout_s=30,
            what=f"both adapter replicas serving desired_replicas {expected} ({what})",
            describe=lambda: f"served {sizing.both(ns, 'digits')}\n{timeline.table()}",
        )
        checkpoints.append(f"{what}: both replicas serve {expected}")

    timeline.start()
    try:
        wait_for(lambda: training_at(2), timeout_s=180, what="the job grown to 2", describe=logs)
        wait_for(lambda: training_at(3), timeout_s=180, what="the job grown to 3", describe=logs)
        settled(3, "grown into the free room")

        apps.create_namespaced_deployment(ns, as_body(sleeper("urgent", urgent_class)))

        def urgent_running() -> str | None:
            pods = core.list_namespaced_pod(ns, label_selector="app=urgent").items
            running = [p for p in pods if p.spec.node_name and p.status.phase == "Running"]
            return running[0].metadata.name if running else None

        urgent = wait_for(urgent_running, timeout_s=120, what="the high-priority pod running",
                          describe=lambda: timeline.table())  # fmt: skip
        # The scheduler found no room for it first (its own Event says so).
        unscheduled = [
            e.message for e in events_for(core, ns, "Pod", urgent) if e.reason == "FailedScheduling"
        ]
        print(f"scheduler on {urgent}: {unscheduled}")
        assert any("Insufficient cpu" in m for m in unscheduled), unscheduled
        wait_for(lambda: training_at(2), timeout_s=120, what="the job shrunk to 2", describe=logs)
        settled(2, "shrunk for the high-priority pod")
        page = sizing.debug_page(sizing.a)
        mine = [j for j in page["plan"]["jobs"] if j["job"] == f"{ns}/trainer"]
        print(f"/debug/sizing after the shrink (this job):\n{json.dumps(mine, indent=1)}")
        assert mine and mine[0]["desired"] == 2
        history_store = ConfigMapHistoryStore(api, ADAPTER_NS, HISTORY)
        # The urgent pod holds the job at 2 until a whole window at 2 is measured: growing back
        # is then decided between two measured sizes, not against the prior.
        wait_for(
            lambda: 2 in history_store.load().observed(f"{ns}/trainer"),
            timeout_s=180,
            what="the shared history holding a measurement at 2 workers (a trained window)",
            describe=lambda: str(history_store.load().observed(f"{ns}/trainer")),
        )

        sizing.b.register()  # the HPA asks the other replica from now on
        sizing.b.wait_available(timeout_s=60)
        apps.delete_namespaced_deployment("urgent", ns)

        def why_not_three() -> str:
            """What each replica planned for the job, what it measured, and the pods."""
            plans = {}
            for name, adapter in (("a", sizing.a), ("b", sizing.b)):
                try:
                    jobs = sizing.debug_page(adapter)["plan"]["jobs"]
                    plans[name] = [j for j in jobs if j["job"] == f"{ns}/trainer"]
                except (requests.RequestException, KeyError) as e:
                    plans[name] = [f"unreadable: {e!r}"]
            pods = [
                (p.metadata.name, p.spec.node_name, p.status.phase)
                for p in core.list_namespaced_pod(ns).items
            ]
            measured = history_store.load().observed(f"{ns}/trainer")
            return (
                f"plans: {json.dumps(plans, indent=1)}\nhistory: {measured}\npods: {pods}\n"
                f"{timeline.table()}\n{logs()}"
            )

        wait_for(lambda: training_at(3), timeout_s=180, what="the job grown back to 3",
                 describe=why_not_three)  # fmt: skip
        settled(3, "grown back, decided by replica b")
        wait_for(
            lambda: 3 in history_store.load().observed(f"{ns}/trainer"),
            timeout_s=90,
            what="the shared history holding a measurement at 3 workers (a trained window)",
            describe=lambda: str(history_store.load().observed(f"{ns}/trainer")),
        )
        events = events_for(core, ns, "Deployment", "trainer")  # before the teardown's own
    finally:
        timeline.stop()
        print(f"\n=== sizing e2e timeline (namespace {ns}) ===\n{timeline.table()}")
        print("\n".join(checkpoints))
        print(f"world history (s, generation, size): {world.history}")
        try:
            autoscaling.delete_namespaced_horizontal_pod_autoscaler("trainer", ns)
            kubectl("-n", ns, "scale", "deployment/trainer", "--replicas=0")
        finally:
            reap_trainers(tmp_path, "examples.train_digits_elastic")
            client.SchedulingV1Api(api).delete_priority_class(urgent_class)

    # What the sizer and the HPA did: 1 -> 2 -> 3, 2 for the urgent pod, 3 again.
    replicas = [
        r[1] for i, r in enumerate(timeline.rows) if i == 0 or timeline.rows[i - 1][1] != r[1]
    ]
    assert replicas == [1, 2, 3, 2, 3], timeline.table()
    # And the world followed (a member that crashed and rejoined would add a dip).
    assert world.sizes[-3:] == [3, 2, 3] and set(world.sizes) <= {1, 2, 3}, world.history
    problems, epochs = _partial_ledger_problems(tmp_path / "ledger")
    assert problems == [], problems
    assert epochs >= 1, "not one epoch completed: the test says nothing about exactly-once"
    # The replicas served the same value at the same time (rows where both answered and
    # the value was not changing that second).
    both = [(r[6], r[7]) for r in timeline.rows if r[6] is not None and r[7] is not None]
    agreeing = sum(1 for a, b in both if a == b)
    print(f"replicas agreed on {agreeing} of {len(both)} polls")
    assert len(both) >= 20 and agreeing >= 0.9 * len(both)
    assert all(1 <= v <= 3 for row in timeline.rows for v in row[6:] if v is not None)
    # Each decision explained on the Deployment (one Event each, though two replicas decide).
    said = [(e.reason, e.message) for e in events if e.reason.startswith("Sizing")]
    print("events:\n" + "\n".join(f"  {r}: {m}" for r, m in said))
    assert any(r == "SizingGrow" and m.startswith("grew to 3") for r, m in said), said
    shrinks = [m for r, m in said if r == "SizingShrink"]
    assert len(shrinks) == 1 and shrinks[0].startswith("shrank to 2"), said  # not one per replica
    # The shared history holds what was measured at each size.
    history = history_store.load()
    measured = history.observed(f"{ns}/trainer")
    print(f"history of {ns}/trainer: {measured}, pause {history.pause(f'{ns}/trainer'):.2f} s")
    assert {2, 3} <= set(measured)
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors


@pytest.mark.parametrize(
    "kubelet_nodes", [(NodeSpec("wide", cpu="11", memory="16Gi"),)], ids=["1x11cpu"]
)
def test_tolerance_zero_lets_the_hpa_apply_10_to_11(
    sizing: SizingAdapters, e2e_ns: E2ENamespace, control_plane: ControlPlane
) -> None:
    ns, api = e2e_ns.name, e2e_ns.api
    apps = client.AppsV1Api(api)
    container = {
        "name": "worker",
        "image": "edl-e2e.invalid/sleeper:local",
        "command": ["python", "-c", "import time; time.sleep(3600)"],
    }
    apps.create_namespaced_deployment(
        ns, as_body(trainer_deployment("wide", "wide", 10, container, 1, 11))
    )
    wait_for(
        lambda: int(apps.read_namespaced_deployment("wide", ns).status.ready_replicas or 0) == 10,
        timeout_s=90,
        what="10 workers running",
        describe=e2e_ns.runner.log_tails,
    )
    # The job has been measured at 10 (as if it had trained there): the sizer may explore 11.
    store = ConfigMapHistoryStore(api, ADAPTER_NS, HISTORY)

    def measured_at_10(h: SizeHistory) -> bool:
        h.observe(f"{ns}/wide", 10, 1000.0, time.time())
        return True

    store.update(measured_at_10)
    wait_for(
        lambda: sizing.served(sizing.b, ns, "wide") == 11,
        timeout_s=60,
        what="the sizer serving 11 for the job at 10",
        describe=lambda: f"served {sizing.both(ns, 'wide')}",
    )
    autoscaling = client.AutoscalingV2Api(api)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(
        ns, as_body(sizing_hpa("wide", "wide", 11, None))
    )
    path = f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/wide"

    def read_metric() -> dict[str, Any] | None:
        status = control_plane.request("GET", path).json().get("status") or {}
        for m in status.get("currentMetrics") or []:
            if m.get("type") == "External":
                return status
        return None

    status = wait_for(read_metric, timeout_s=60, what="the HPA reading desired_replicas")
    assert control_plane.controller_manager is not None
    log, since = control_plane.controller_manager.log, time.time()
    wait_for(  # eight more syncs, counted in the controller's own log
        lambda: len(read_syncs(log, ns, "wide", since=since)) >= 8,
        timeout_s=120,
        what="eight more HPA syncs of deployment wide",
    )
    status = read_metric() or status
    print(f"default tolerance: {json.dumps(status)}")
    assert status["currentMetrics"][0]["external"]["current"]["averageValue"] == "1100m"
    assert status["desiredReplicas"] == 10  # 11 / 10 = 1.1: inside the 10 % tolerance
    assert apps.read_namespaced_deployment("wide", ns).spec.replicas == 10

    patch = {"spec": {"behavior": {"scaleUp": {"tolerance": "0"}}}}
    autoscaling.patch_namespaced_horizontal_pod_autoscaler("wide", ns, patch)
    assert (
        control_plane.request("GET", path).json()["spec"]["behavior"]["scaleUp"]["tolerance"] == "0"
    )
    wait_for(
        lambda: apps.read_namespaced_deployment("wide", ns).spec.replicas == 11,
        timeout_s=60,
        what="the HPA applying 11 with tolerance 0",
    )
    autoscaling.delete_namespaced_horizontal_pod_autoscaler("wide", ns)
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors


@pytest.mark.parametrize("kubelet_nodes", [(NodeSpec("roomy", cpu="8", memory="16Gi"),)],
                         ids=["1x8cpu"])  # fmt: skip
def test_the_plan_stops_at_the_namespaces_resource_quota(
    sizing: SizingAdapters, e2e_ns: E2ENamespace
) -> None:
    """A node with room for 8 workers, a job that scales linearly to 8, a quota for 3 CPUs:
    the sizer serves 3 (a 4th worker would end in FailedCreate), then 5 once the quota is 5."""
    ns, api = e2e_ns.name, e2e_ns.api
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute"},
        "spec": {"hard": {"requests.cpu": "3"}},
    }
    core.create_namespaced_resource_quota(ns, as_body(quota))
    wait_for(
        lambda: (
            (core.read_namespaced_resource_quota("compute", ns).status.hard or {}).get(
                "requests.cpu"
            )
            == "3"
        ),
        timeout_s=60,
        what="the quota controller filling in the quota's status",
    )
    container = {
        "name": "worker",
        "image": "edl-e2e.invalid/sleeper:local",
        "command": ["python", "-c", "import time; time.sleep(3600)"],
    }
    apps.create_namespaced_deployment(
        ns, as_body(trainer_deployment("quota", "quota", 2, container, 1, 8))
    )
    wait_for(
        lambda: int(apps.read_namespaced_deployment("quota", ns).status.ready_replicas or 0) == 2,
        timeout_s=90,
        what="2 workers running",
        describe=e2e_ns.runner.log_tails,
    )
    linear_history(api, f"{ns}/quota")
    wait_for(
        lambda: sizing.served(sizing.a, ns, "quota") == 3,
        timeout_s=90,
        what="the sizer serving 3: what the quota admits beside the 2 workers",
        describe=lambda: f"served {sizing.both(ns, 'quota')}",
    )
    decision = _decision(sizing, f"{ns}/quota")
    print(f"under a quota of 3 CPUs: {json.dumps(decision)}")
    assert decision["desired"] == 3 and decision["limitedBy"] == "no_capacity"
    for _ in range(5):  # it stays there: the 1 s rounds never plan past the quota
        time.sleep(1)
        served = sizing.served(sizing.a, ns, "quota")
        assert served == 3, json.dumps(_decision(sizing, f"{ns}/quota"))
    core.patch_namespaced_resource_quota("compute", ns, {"spec": {"hard": {"requests.cpu": "5"}}})
    wait_for(
        lambda: sizing.served(sizing.a, ns, "quota") == 5,
        timeout_s=90,
        what="the sizer serving 5 once the quota admits 5 CPUs",
        describe=lambda: f"served {sizing.both(ns, 'quota')}",
    )
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors
