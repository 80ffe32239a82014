"""`make demo-cluster`: the same story on a real control plane and real kubelets.

What runs, all on this machine's loopback addresses: etcd, kube-apiserver (with the
ServiceAccount admission plugin: pods get projected tokens), kube-controller-manager (with the
real HPA controller, syncing every second) and kube-scheduler, built from the Go module proxy
(``tests/e2e/controlplane/build.sh``, cached in ``~/.cache/edl``); three nodes
``edl-node-1..3``, each containerd v2 and a kubelet (``tests/e2e/node/build.sh``; the e2e
harness's :class:`~tests.e2e.harness.kubelet_node.KubeletNodeGroup`) with 1 allocatable CPU
(:mod:`examples.demo.nodes`): every pod is a container the kubelets start from EDL's trainer
image (``make images``, imported into each node's containerd); the real ``edl-adapter`` with
its sizer on the Kubernetes capacity source, behind the aggregation layer (APIService,
front-proxy mTLS, delegated auth).

The job is the repository's example, ``manifests/examples/digits-trainer``: its Deployment
(adapted only where these nodes need it: the local image, the host network, kube-apiserver's
loopback address, the demo's folders mounted from the host), its RBAC and its HPA
``hpa-sizing.yaml`` on ``desired_replicas``, unchanged. The other work are Deployments of
1-CPU sleeper pods from the same image: a batch job of 2 pods at the start, and a service of 2
pods of PriorityClass ``edl-demo-urgent`` (value 1000, ``preemptionPolicy: Never``: it waits
for room, and the sizer makes it).

``python -m examples.demo.on_cluster [--short] [--plain] [--out DIR]``; the kubeconfig to
watch it with ``kubectl`` is printed at the start.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, TextIO

import requests
import yaml

from agent.trainer.step_gate import StepGate
from edl_common.quantity import parse_quantity
from examples.demo.cli import main
from examples.demo.control import HPA_FILE
from examples.demo.nodes import NODES, DemoNodes, reserved_of_machine, trainer_image
from examples.demo.pod_logs import PodLogCopies
from examples.demo.run import AGENT_ENV, REPO_ROOT, Demo, DemoError, DemoOptions, sizer_of
from examples.demo.story import Stage
from examples.demo.telemetry import JobTelemetry, World, parse_world
from examples.demo.view import ClusterState, PodView, Sizer, cluster_state
from tests.e2e.harness.adapter import AdapterSettings, MetricsAdapter
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.incluster import apiserver_env, kubelet_session_settings
from tests.e2e.harness.processes import HarnessError
from tests.support.waiting import wait_for

EXAMPLE = REPO_ROOT / "manifests" / "examples" / "digits-trainer"
NAMESPACE = "ml"
DEPLOYMENT = "digits-trainer"
METRICS_PORT = 9400
URGENT = "edl-demo-urgent"
SIZING_ARGS = [
    "--sizing", "--sizing-interval=1s", "--sizing-history-interval=2s",
    "--sizing-history-namespace=edl-system", "--sizing-hold-off=5s", "--sizing-exploration=3",
]  # fmt: skip
"""The demo's time runs faster than a cluster's: decisions every second, a short hold-off,
and (one size measured) the maximum of 3 tried at once."""
INTERESTING = ("SuccessfulRescale", "SizingGrow", "SizingShrink", "FailedScheduling")
"""Events shown as they happen: the HPA's rescales, the sizer's decisions, the scheduler's
"no room"."""


COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "ServiceAccount": f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
    "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles",
    "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings",
    "Deployment": f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
    "HorizontalPodAutoscaler": (
        f"/apis/autoscaling/v2/namespaces/{NAMESPACE}/horizontalpodautoscalers"
    ),
}
"""Where each kind the demo creates lives in kube-apiserver's REST API."""
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
_SELECTOR = re.compile(r"\(&LabelSelector\{.*\}\)")
"""The Go dump of a metric's selector in the HPA's messages (the job label, said already)."""
_LONG_HEX = re.compile(r"\b([0-9a-f]{12})[0-9a-f]{20,}\b")


class Kube:
    """kube-apiserver's REST API, JSON in and out, as the cluster admin."""

    def __init__(self, cp: Any) -> None:
        self._cp = cp

    def get(self, path: str) -> dict[str, Any]:
        """GET; {} when it is not there."""
        r = self._cp.request("GET", path, ok=(200, 404))
        doc: dict[str, Any] = r.json() if r.status_code == 200 else {}
        return doc

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        """POST a manifest's object to its collection."""
        created: dict[str, Any] = self._cp.request(
            "POST", COLLECTIONS[doc["kind"]], json=doc, ok=(201,)
        ).json()
        return created

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to a subresource (e.g. a ServiceAccount's token)."""
        answer: dict[str, Any] = self._cp.request("POST", path, json=body, ok=(200, 201)).json()
        return answer

    def delete(self, kind: str, name: str) -> None:
        """DELETE (gone already is fine)."""
        self._cp.request("DELETE", f"{COLLECTIONS[kind]}/{name}", ok=(200, 202, 404))

    def scale(self, deployment: str, replicas: int) -> None:
        """What `kubectl scale` does."""
        self._cp.request(
            "PATCH", f"{COLLECTIONS['Deployment']}/{deployment}/scale",
            json={"spec": {"replicas": replicas}},
            headers={"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip

    def pods(self, selector: str = "") -> list[dict[str, Any]]:
        """The namespace's pods (matching ``selector``)."""
        query = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        items: list[dict[str, Any]] = self.get(PODS + query).get("items", [])
        return items


def _bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName"))


def _deleting(pod: dict[str, Any]) -> bool:
    return "deletionTimestamp" in pod["metadata"]


def _app(pod: dict[str, Any]) -> str:
    return str(pod["metadata"].get("labels", {}).get("app", "?"))


def _running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return any("running" in (s.get("state") or {}) for s in statuses)


def _short(ref: object) -> str:
    """A container or image id (``containerd://0123...``, ``sha256:0123...``) with 12 hex
    digits."""
    return _LONG_HEX.sub(r"\1", str(ref or "?"))


def _cpu(pod: dict[str, Any]) -> int:
    requests_ = pod["spec"]["containers"][0].get("resources", {}).get("requests", {})
    return int(float(requests_.get("cpu", "0")))


SLEEPER = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "time.sleep(3600)"
)
"""The other work's container: sleeps, leaves at once on SIGTERM (it is PID 1)."""


class KubeStage:
    """The story's other work as Deployments of 1-CPU sleeper pods of EDL's trainer image."""

    slots = NODES  # 1 allocatable CPU each

    def __init__(self, kube: Kube, image: str) -> None:
        self._kube = kube
        self._image = image

    def add_workload(self, name: str, count: int, cpu: int, priority: int) -> None:
        """A Deployment ``name`` of ``count`` pods (PriorityClass ``edl-demo-urgent`` when
        ``priority`` > 0)."""
        spec: dict[str, Any] = {
            "hostNetwork": True,  # the nodes have no pod network
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": name,
                    "image": self._image,
                    "imagePullPolicy": "Never",  # imported into each node: no registry
                    "command": ["python", "-c", SLEEPER],
                    "resources": {"requests": {"cpu": str(cpu), "memory": "64Mi"}},
                }
            ],
        }
        if priority > 0:
            spec["priorityClassName"] = URGENT
        labels = {"app": name}
        self._kube.create({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": count, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec}},
        })  # fmt: skip

    def remove_workload(self, name: str) -> None:
        """Deletes the Deployment (its pods go with it)."""
        self._kube.delete("Deployment", name)

    def workload_bound(self, name: str) -> bool:
        """All its pods are scheduled and none is being deleted."""
        want = self._kube.get(f"{COLLECTIONS['Deployment']}/{name}").get("spec", {})
        live = [p for p in self._kube.pods(f"app={name}") if not _deleting(p)]
        return len(live) == want.get("replicas", -1) and all(_bound(p) for p in live)


def trainer_deployment(
    args: list[str], env: dict[str, str], image: str, folders: list[Path], checkpoints: Path
) -> dict[str, Any]:
    """The example's Deployment, with what these nodes need.

    The image from the local build (``imagePullPolicy: Never``), the host network (the nodes
    have no CNI; the containerPort keeps one trainer per node) with the agent on its pod IP,
    ``env`` added (kube-apiserver's loopback address, the ledger's folder, the demo's
    timings), and the demo's ``folders`` (the ledger, the step gate and the result, the
    checkpoints) mounted from the host at the same paths. Its checkpoints go to
    `checkpoints` (in the demo's work folder, new each run: the example's optional
    checkpoints component mounts a volume that a later run would find finished).
    """
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / "deployment.yaml").read_text())
    doc["metadata"]["annotations"]["edl.paddlepaddle.org/max-workers"] = "3"  # 3 slots
    pod = doc["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    (c,) = pod["containers"]
    c["image"] = image
    c["imagePullPolicy"] = "Never"
    dashdash = c["command"].index("--")
    agent = [a if a != "8" else "3" for a in c["command"][:dashdash]]  # --max, as the annotation
    if "--checkpoint-url" in agent:  # the example's checkpoints component
        agent[agent.index("--checkpoint-url") + 1] = str(checkpoints)
    else:  # the base example has none; the demo keeps them, in its own folder
        agent += ["--checkpoint-url", str(checkpoints)]
    c["command"] = [*agent[:3], "--host=$(POD_IP)", f"--port={METRICS_PORT}", *agent[3:], "--",
                    "python", "-m", "examples.train_digits_elastic", *args]  # fmt: skip
    c["env"] = c["env"] + [{"name": k, "value": v} for k, v in env.items()]
    for i, folder in enumerate(folders):
        volume = f"demo-{i}"
        pod["volumes"].append(
            {"name": volume, "hostPath": {"path": str(folder), "type": "Directory"}}
        )
        c["volumeMounts"].append({"name": volume, "mountPath": str(folder)})
    return doc


class ClusterDemo(Demo):
    """``make demo-cluster``: the story on the real control plane and kubelets."""

    title = f"on a real control plane and {NODES} kubelet nodes of 1 CPU"
    command = "python -m examples.demo.on_cluster"

    def __init__(self, opts: DemoOptions, out: TextIO = sys.stdout) -> None:
        super().__init__(opts, out)
        cpus, reserved = reserved_of_machine()
        self.title = f"on {NODES} kubelets of 1 CPU ({reserved} of {cpus} reserved each)"
        shared = self.work / "job"  # mounted into the trainers: the result and the step gate
        self.result = shared / "result.json"
        self.gate = StepGate(shared / "step-gate")
        self.folders = [shared, self.work / "ledger", self.work / "checkpoints"]
        self.cp: Any = None
        self.nodes: DemoNodes | None = None
        self.image = ""
        self.adapter: Any = None
        self.kube: Kube | None = None
        self._pods: list[dict[str, Any]] = []
        self._replicas = 1
        self._hpa: tuple[str, int | None] = ("-", None)
        self._seen: set[str] = set()
        self._containers: set[str] = set()
        self.pod_logs = PodLogCopies(self.work / "pods")
        """The trainers' logs, kept after their pods (the kubelet removes its files)."""

    def _k(self) -> Kube:
        assert self.kube is not None, "the control plane is not up"
        return self.kube

    # -- bring-up -----------------------------------------------------------------------------

    def start(self) -> Stage:
        """Control plane, nodes and the trainer image (built if needed), scheduler, adapter,
        RBAC."""
        try:
            return self._start()
        except HarnessError as e:
            tails = self.nodes.log_tails() if self.nodes is not None else ""
            raise DemoError(f"the cluster did not come up: {e}\n{tails}") from e

    def _start(self) -> Stage:
        self.say(
            "control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and "
            "node (kubelet, containerd) from ~/.cache/edl, built from the Go module proxy if "
            "missing (once: about 6 + 5 minutes on 2 cores) ..."
        )
        began = time.monotonic()
        bin_dir = ensure_binaries()
        self.cp = cp = ControlPlane(
            kubelet_session_settings(
                ControlPlaneSettings(bin_dir=bin_dir, work_dir=self.work / "cluster")
            )
        )
        self.nodes = nodes = DemoNodes(cp, self.work / "nodes")
        took = time.monotonic() - began
        self.say(f"  {'built' if took > 30 else 'found'} in {took:.0f} s")
        self.say("EDL's trainer image (make images, for the trainer: built if its inputs changed)")
        began = time.monotonic()
        self.image = trainer_image()
        self.say(f"  {self.image} in {time.monotonic() - began:.0f} s")
        began = time.monotonic()
        cp.start()
        cp.start_scheduler()
        self.kube = kube = Kube(cp)
        for ns in (NAMESPACE, "edl-system"):
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        nodes.start()
        self.say(f"  control plane and nodes up in {time.monotonic() - began:.0f} s: "
                 f"{nodes.addresses()} (1 allocatable CPU each)")  # fmt: skip
        imports = ", ".join(f"{n} {s:.0f} s" for n, s in nodes.import_image(self.image).items())
        self.say(f"  the image imported into each node's containerd: {imports}")
        began = time.monotonic()
        self.adapter = MetricsAdapter(cp, AdapterSettings(extra_args=SIZING_ARGS))
        self.adapter.start()
        self.adapter.register()
        self.adapter.wait_available(timeout_s=90)
        kube.create({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": URGENT}, "value": 1000, "preemptionPolicy": "Never",
        })  # fmt: skip
        for doc in yaml.safe_load_all((EXAMPLE / "rbac.yaml").read_text()):
            kube.create(doc)
        for folder in self.folders:  # the trainers run as uid 65532
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)
        self.say(f"  adapter up in {time.monotonic() - began:.0f} s")
        return KubeStage(kube, self.image)

    def launch(self) -> None:
        """Once the batch job runs: the example's trainer Deployment and HPA."""
        kube = self._k()
        stage = KubeStage(kube, self.image)
        wait_for(lambda: stage.workload_bound("batch"), timeout_s=120, what="the batch job")
        env = {
            "EDL_SAMPLE_LEDGER": str(self.work / "ledger"),
            "EDL_TRAINER_PORTS": "auto",  # the trainers share the host's network
            **{e["name"]: e["value"] for e in apiserver_env(self.cp)},
            **AGENT_ENV,
        }
        args = self.trainer(*self.job_args(), python="python")[3:]
        kube.create(
            trainer_deployment(args, env, self.image, self.folders, self.work / "checkpoints")
        )
        kube.create(yaml.safe_load(HPA_FILE.read_text()))
        self.say(f"  export KUBECONFIG={self.cp.kubeconfig}")
        self.say(f"  kubectl -n {NAMESPACE} get hpa,deployments,pods -o wide   # while it runs")
        self.say(f"  logs: {self.work / 'cluster' / 'logs'} (control plane, adapter), "
                 f"{self.work / 'pods'} (the trainers), {self.work / 'nodes'}/*/logs "
                 "(kubelets, containerd); Ctrl-C stops everything")  # fmt: skip
        self.say("")

    # -- each tick ----------------------------------------------------------------------------

    def telemetry(self) -> JobTelemetry:
        """The world record is the job's ConfigMap ``edl-digits-world``."""
        kube = self._k()
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/edl-{self.job.name}-world"

        def read() -> World:
            return parse_world(kube.get(path).get("data", {}).get("world") or "")

        return JobTelemetry(read, self.opts.global_batch)

    def sync_agents(self) -> dict[str, tuple[str, int, Path]]:
        """The trainer pods whose container runs (their agents answer on the pod IP, their
        node's address), with the kubelet's log file of it; the logs' copies grow."""
        assert self.nodes is not None
        agents: dict[str, tuple[str, int, Path]] = {}
        for pod in self._k().pods("app=trainer"):
            name = pod["metadata"]["name"]
            ip = pod.get("status", {}).get("podIP")
            log = self.nodes.log_of(pod, "trainer")
            if log is not None:
                self.pod_logs.watch(name, log)
            if ip and log is not None and _running(pod):
                agents[name] = (ip, METRICS_PORT, log)
        self.pod_logs.copy()
        return agents

    def react(self, t: float) -> None:
        """Nothing to drive (the controllers do it): read what they did."""
        kube = self._k()
        self._pods = kube.pods()
        self._note_containers(t)
        deployment = kube.get(f"{COLLECTIONS['Deployment']}/{DEPLOYMENT}")
        self._replicas = int(deployment.get("spec", {}).get("replicas", 0))
        status = kube.get(f"{COLLECTIONS['HorizontalPodAutoscaler']}/{DEPLOYMENT}").get(
            "status", {}
        )
        read = "-"
        for m in status.get("currentMetrics") or []:
            average = m.get("external", {}).get("current", {}).get("averageValue")
            if average is not None:  # the status holds the value per current replica
                total = parse_quantity(str(average)) * int(status.get("currentReplicas") or 0)
                read = f"{float(total):g} (status: averageValue {average})"
        self._hpa = (read, status.get("desiredReplicas"))
        events = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events").get("items", [])
        for e in sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime"))):
            # a repeated event is the same object with a higher count
            seen = f"{e['metadata']['uid']}/{e.get('count', 1)}"
            if seen in self._seen or e.get("reason") not in INTERESTING:
                continue
            self._seen.add(seen)
            obj = e.get("involvedObject", {})
            who = f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}"
            message = _SELECTOR.sub("", str(e.get("message", "")))
            self.log.add(t, f"event {e['reason']} on {who}: {message}")

    def _note_containers(self, t: float) -> None:
        """Logs each container a kubelet started (its node, id and image id), once."""
        for pod in self._pods:
            for c in pod.get("status", {}).get("containerStatuses") or []:
                cid = str(c.get("containerID") or "")
                if not cid or "running" not in (c.get("state") or {}) or cid in self._containers:
                    continue
                self._containers.add(cid)
                self.log.add(
                    t,
                    f"kubelet {pod['spec'].get('nodeName')}: pod {pod['metadata']['name']} runs "
                    f"container {_short(cid)} of {c.get('image')} ({_short(c.get('imageID'))})",
                )

    def sizer(self) -> Sizer | None:
        """The adapter's ``/debug/sizing`` (as the cluster admin)."""
        pki = self.cp.pki
        try:
            r = requests.get(f"{self.adapter.url}/debug/sizing", timeout=3,
                             cert=(str(pki.admin.cert), str(pki.admin.key)),
                             verify=str(pki.ca.cert))  # fmt: skip
            plan = r.json().get("plan") or {}
        except (requests.RequestException, ValueError):
            return None
        for entry in plan.get("jobs", []):
            if entry.get("job") == f"{NAMESPACE}/{DEPLOYMENT}":
                return sizer_of(entry)
        return None

    def cluster_state(self) -> ClusterState:
        """Counted from the pods as the API lists them."""
        pods = [
            PodView(_app(p), _cpu(p), _bound(p), _deleting(p), int(p["spec"].get("priority", 0)))
            for p in self._pods
            if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        return cluster_state(pods, KubeStage.slots, self._replicas, *self._hpa)

    def drained(self, since_finish: float) -> bool:
        """The finished job's agents idle ready (the example's ``--on-finished idle``)."""
        return True

    def stop_job(self) -> list[int]:
        """Deletes the HPA and scales the trainers to 0 (what a user does once it is done);
        returns the restart counts of containers that restarted."""
        kube = self._k()
        restarts = [
            int(s["restartCount"])
            for p in kube.pods("app=trainer")
            for s in p.get("status", {}).get("containerStatuses", [])
            if s.get("restartCount")
        ]
        kube.delete("HorizontalPodAutoscaler", DEPLOYMENT)
        kube.scale(DEPLOYMENT, 0)

        def gone() -> bool:
            self.pod_logs.copy()  # their last lines (the drain) before the kubelet removes them
            return not kube.pods("app=trainer")

        try:
            wait_for(gone, timeout_s=120, what="the trainers gone")
        except Exception as e:
            raise DemoError(f"the trainer pods did not go away: {e}") from e
        return restarts

    def shutdown(self) -> None:
        """Nodes (their containers and state), adapter, control plane; never raises."""
        for part in (self.nodes, self.adapter, self.cp):
            if part is None:
                continue
            try:
                part.stop()
            except Exception as e:  # the rest must still stop
                self.say(f"stopping {type(part).__name__}: {e!r}")


if __name__ == "__main__":
    sys.exit(main(kind=ClusterDemo))
