"""Elastic training from EDL's trainer image, its pods run by real kubelets (several nodes).

A Deployment of `localhost/edl-trainer` (tests/e2e/harness/kubelet_trainer.py: host network,
one trainer per node, the agent on its pod IP, its in-cluster client on the projected
ServiceAccount token) is run by the kubelets of `kubelet_node_group` (three nodes on loopback
addresses of their own). What only a kubelet shows, checked as a user would:

* `kubectl scale` 1 -> 3 -> 2 -> 1 (Paddle, `EDL_REINIT` auto and process; PyTorch's scale
  test stays on the pod runner, tests/e2e/agent/test_elastic_scale.py: its image is 3.7 GB):
  the world re-forms at each size, one trainer per node, every agent exports it on its pod IP
  (the metrics the HPA side reads), the job trains every sample of every epoch exactly once
  (the sample ledger, read from a hostPath folder), the restored global step never goes back,
  the accuracy is within 1 point of a one-process run, and once finished the agents idle (a pod
  added after the end trains nothing);
* `kubectl delete` of every trainer pod at once: the ReplicaSet's new pods find no member
  with training state and restore from the newest checkpoint. The checkpoint volume is a
  hostPath folder every pod mounts at `/edl-checkpoints` (`EDL_CHECKPOINT_URL`): it stands in
  for the ReadWriteMany claim, since all the nodes are this one machine; a real volume the
  kubelet mounts into each container, with no gateway process beside the nodes (the S3 path
  is covered by the integration layer);
* a container killed with SIGKILL is restarted by its kubelet (restartCount 1) and its agent
  rejoins the world as a new member, no sample lost or repeated;
* a pod deleted during training leaves the world through SIGTERM (its container exits 0, not
  killed at the end of its grace period), the world without it published before
  `terminationGracePeriodSeconds` ends, no sample lost (how long it took is printed by
  bench/bench_kubelet_pod_deletion.py, never asserted).
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.local import LocalDirectory
from agent.protocol.control import Timings
from agent.trainer.ledger import verify
from agent.trainer.step_gate import StepGate
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import (
    EPOCHS,
    GLOBAL_BATCH,
    JOB,
    TRAIN_ARGS,
    WorldWatch,
)
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.e2e.harness.kubelet_trainer import (
    AGENT_PORT,
    NAME,
    log_tails,
    prepare_namespace,
    remove_job,
    shared_folder,
    started_from,
    trainer_deployment,
    trainer_pods,
)
from tests.e2e.harness.scale_checks import Pauses, finished_pods_idle, goes_through
from tests.e2e.harness.session import Kubectl
from tests.support.digits_job import NUM_TRAIN, SCRIPTS, reference_accuracy
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.kubelet]

GRACE_S = 30


@dataclass
class Job:
    """One test's trainer Deployment and what it reads."""

    api: client.ApiClient
    namespace: str
    kubectl: Kubectl
    shared: Path
    watch: WorldWatch
    gate: StepGate
    nodes: KubeletNodeGroup

    def scale(self, replicas: int) -> None:
        self.kubectl("-n", self.namespace, "scale", f"deployment/{NAME}", f"--replicas={replicas}")

    def logs(self) -> str:
        """The trainers' last log lines and the world history, for a failed wait."""
        out = [f"world history (s, generation, size): {self.watch.history}"]
        return "\n".join(out + log_tails(self.api, trainer_pods(self.api, self.namespace)))

    def members(self) -> list[dict[str, Any]]:
        return list(self.watch.record().get("members") or [])

    def training(self, size: int, after: int, steps: int) -> int:
        """Waits (bounded) for a generation > `after` of `size` members to train `steps`."""
        return wait_for(
            functools.partial(self.watch.training_at, size, after, steps),
            timeout_s=240,
            what=f"a world of {size} training (after generation {after})",
            describe=self.logs,
        )

    def finish(self, epochs: int = EPOCHS) -> dict[str, Any]:
        """Opens the gate, waits (bounded) for the result; checks the ledger is exact."""
        self.gate.allow_all()
        result = self.shared / "result.json"
        wait_for(result.exists, timeout_s=300, what="the job to finish", describe=self.logs)
        final: dict[str, Any] = json.loads(result.read_text())
        report = verify(self.shared / "ledger")
        assert report.problems(NUM_TRAIN, epochs) == []
        assert final["global_step"] == report.steps == epochs * -(-NUM_TRAIN // GLOBAL_BATCH)
        return final

    def finished(self) -> dict[str, Any]:
        """The world record, once (bounded) it says the job finished."""
        record: dict[str, Any] = wait_for(
            lambda: r if (r := self.watch.record()).get("finished") else None,
            timeout_s=30,
            what="the world record marked finished",
            describe=self.logs,
        )
        return record


@pytest.fixture
def job(
    kubelet_node_group: KubeletNodeGroup,
    edl_images: dict[str, str],
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    kubectl: Kubectl,
    tmp_path: Path,
) -> Iterator[Job]:
    """A namespace with the agent's RBAC, the trainer image in every node, a shared folder."""
    image = edl_images["trainer"]
    took = kubelet_node_group.import_image(image)
    print(f"imported {image} into the nodes (s): {took}")
    ns = f"kubelet-elastic-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(kube_api)
    prepare_namespace(kube_api, control_plane, kubectl, ns, tmp_path)
    shared = shared_folder(tmp_path / "shared")
    gate = StepGate(shared / "step-gate")
    gate.allow(0)
    (shared / "step-gate").chmod(0o644)
    watch_ = WorldWatch(core, ns, shared / "ledger", gate=gate)
    made = Job(kube_api, ns, kubectl, shared, watch_, gate, kubelet_node_group)
    try:
        yield made
    finally:
        print(made.logs())
        remove_job(kube_api, ns, NAME, GRACE_S)


def _create(job: Job, cp: ControlPlane, image: str, replicas: int, **kw: Any) -> None:
    body = trainer_deployment(image, job.shared, cp, replicas=replicas, grace_s=GRACE_S, **kw)
    client.AppsV1Api(job.api).create_namespaced_deployment(job.namespace, as_body(body))


def _running(job: Job) -> list[Any]:
    """Pods whose container is running and ready."""
    out = []
    for pod in trainer_pods(job.api, job.namespace):
        statuses = pod.status.container_statuses or []
        if pod.metadata.deletion_timestamp is None and statuses and statuses[0].ready:
            out.append(pod)
    return out


def _ready_pods(job: Job, size: int) -> list[Any]:
    pods: list[Any] = wait_for(
        lambda: ps if len(ps := _running(job)) == size else None,
        timeout_s=120,
        what=f"{size} trainer pods ready",
        describe=job.logs,
    )
    return pods


@pytest.mark.parametrize("reinit", ["auto", "process"])
def test_kubectl_scale_1_3_2_1_on_three_kubelets_trains_every_sample_once(
    job: Job, control_plane: ControlPlane, edl_images: dict[str, str], reinit: str
) -> None:
    """`auto`: survivors re-initialise in-process where Paddle allows; `process`: restarts."""
    image = edl_images["trainer"]
    _create(job, control_plane, image, 1, env=[{"name": "EDL_REINIT", "value": reinit}])
    pauses = Pauses(AGENT_PORT, lambda: [p.status.pod_ip for p in _running(job)])
    gen = job.training(1, 0, 5)
    _ready_pods(job, 1)
    pauses.last(wait_for(lambda: pauses.agree(1, gen), timeout_s=90, what="metrics of 1"))
    steps: list[str] = []
    for size in (3, 2, 1):
        before = job.watch.global_step()
        t0 = time.monotonic()
        job.scale(size)
        gen = job.training(size, gen, 8 if size > 1 else 1)
        took = time.monotonic() - t0
        pods = _ready_pods(job, size)
        assert len({p.spec.node_name for p in pods}) == size  # one trainer per node: its port
        hosts = {m["host"] for m in job.members()}
        assert hosts == {p.status.pod_ip for p in pods}
        started_from(pods, image)
        seen = wait_for(
            functools.partial(pauses.agree, size, gen),
            timeout_s=90,
            what=f"every agent exporting world_size {size}, generation {gen}",
            describe=job.logs,
        )
        steps.append(
            f"-> {size}: generation {gen}, trained {took:.1f} s after the scale "
            f"(global step {before} then), pause {pauses.last(seen):.2f} s"
        )
        print(steps[-1])
    final = job.finish()
    finished = job.finished()
    finished_pods_idle(
        lambda: [p.status.pod_ip for p in _running(job)],
        AGENT_PORT,
        job.scale,
        job.watch,
        job.logs,
    )
    # Each scale reaches its size; on the way up a joiner ready later than its peer may train
    # a world of its own: sizes between two targets, moving toward the next, never beyond it.
    assert goes_through(job.watch.sizes, [1, 3, 2, 1]), job.watch.history
    assert len(steps) == 3
    assert final["world_size"] == 1
    assert finished["finished_at_step"] == final["global_step"]
    report = verify(job.shared / "ledger")
    restores = [report.restores[g] for g in report.generations]
    assert restores == sorted(restores)  # the global step never went back
    reference = reference_accuracy(job.shared.parent, TRAIN_ARGS, SCRIPTS["paddle"])
    print(
        f"generations {report.generations} restored at {restores}; "
        f"rolled back {report.rolled_back_steps}; "
        f"accuracy {final['accuracy']:.4f} vs one process {reference:.4f}"
    )
    assert abs(final["accuracy"] - reference) <= 0.01
    timings = [
        Timings.from_json(p.read_text()) for p in job.shared.glob("members/*/control/timings-*")
    ]
    assert {t.reinit for t in timings} == ({"in-process"} if reinit == "auto" else {"process"})
    assert {t.framework for t in timings} == {"paddle"}


CHECKPOINT_EPOCHS = 5


def test_kubectl_delete_of_every_trainer_pod_resumes_from_the_checkpoint(
    job: Job, control_plane: ControlPlane, edl_images: dict[str, str]
) -> None:
    image = edl_images["trainer"]
    volume = shared_folder(job.shared.parent / "claim")  # the volume every pod mounts
    train_args = [*TRAIN_ARGS, "--step-sleep", "0.2"]
    train_args[train_args.index("--epochs") + 1] = str(CHECKPOINT_EPOCHS)
    env = [
        {"name": "EDL_CHECKPOINT_EVERY_STEPS", "value": "10"},
        {"name": "EDL_CHECKPOINT_EVERY_SECONDS", "value": "0"},
    ]
    _create(job, control_plane, image, 2, train_args=train_args, env=env, checkpoints=volume)
    checkpoints = Checkpoints(LocalDirectory(volume / JOB))

    def checkpointed_world() -> int | None:
        trained = job.watch.training_at(2, 0, 25)  # first: it also opens the gate
        return trained if trained is not None and checkpoints.latest() else None

    gen = wait_for(
        checkpointed_world,
        timeout_s=240,
        what="a world of 2 training, checkpointed",
        describe=job.logs,
    )
    old = [p.metadata.name for p in _ready_pods(job, 2)]
    newest = checkpoints.latest()
    assert newest is not None
    job.kubectl("-n", job.namespace, "delete", "pod", *old, "--wait=false")
    resumed = job.training(2, gen, 5)
    pods = _ready_pods(job, 2)
    assert not set(old) & {p.metadata.name for p in pods}
    started_from(pods, image)
    final = job.finish(CHECKPOINT_EPOCHS)
    finished = job.finished()
    report = verify(job.shared / "ledger")
    assert final["global_step"] == finished["finished_at_step"]
    from_checkpoint = {g: report.restores[g] for g in report.checkpoints}
    assert from_checkpoint, report.restores  # no member had state: the checkpoint did
    (first, step), *_ = sorted(from_checkpoint.items())
    assert gen < first <= resumed and step >= newest.step > 0
    print(
        f"deleted both pods in generation {gen} (newest checkpoint then: step {newest.step}); "
        f"generation {first} resumed at step {step} from {report.checkpoints[first]}; "
        f"redone {report.rolled_back_steps} steps ({report.redone_samples} samples)"
    )
    reference = reference_accuracy(job.shared.parent, train_args[:6], SCRIPTS["paddle"])
    assert abs(final["accuracy"] - reference) <= 0.01


def test_a_sigkilled_container_is_restarted_and_rejoins_as_a_new_member(
    job: Job, control_plane: ControlPlane, edl_images: dict[str, str]
) -> None:
    _create(job, control_plane, edl_images["trainer"], replicas=2)
    gen = job.training(2, 0, 5)
    victim = wait_for(
        lambda: ps[-1] if len(ps := _running(job)) == 2 else None,
        timeout_s=60,
        what="2 trainer pods ready",
        describe=job.logs,
    )
    before = {m["host"]: (m["id"], m["incarnation"]) for m in job.members()}
    node = next(n for n in job.nodes.nodes if n.name == victim.spec.node_name)
    container = victim.status.container_statuses[0].container_id.removeprefix("containerd://")
    node.ctr("tasks", "kill", "--signal", "SIGKILL", container, timeout_s=30)

    def restarted() -> Any:
        pod: Any = client.CoreV1Api(job.api).read_namespaced_pod(
            victim.metadata.name, job.namespace
        )
        statuses = pod.status.container_statuses or []
        return pod if statuses and statuses[0].restart_count == 1 and statuses[0].ready else None

    pod = wait_for(restarted, timeout_s=180, what="the container restarted", describe=job.logs)
    (status,) = pod.status.container_statuses
    last = status.last_state.terminated
    assert last is not None and last.exit_code == 137, status  # it was SIGKILLed
    assert status.container_id != victim.status.container_statuses[0].container_id
    gen = job.training(2, gen, 8)
    after = {m["host"]: (m["id"], m["incarnation"]) for m in job.members()}
    assert set(after) == set(before) == {victim.status.pod_ip, *before}
    assert after[victim.status.pod_ip] != before[victim.status.pod_ip]  # a new member
    job.finish()


class _LastStatus:
    """Watches one pod until it is gone; keeps its last container termination seen."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.terminated: Any = None
        self.gone_at: float | None = None
        self.watching = threading.Event()
        """Set on the watch's first event (the pod as it is): from then on none is missed."""
        self._args = (api, namespace, name)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        api, namespace, name = self._args
        w = watch.Watch()
        stream = w.stream(
            client.CoreV1Api(api).list_namespaced_pod,
            namespace,
            field_selector=f"metadata.name={name}",
            timeout_seconds=GRACE_S + 60,
        )
        for event in stream:
            self.watching.set()
            pod = event["object"]
            for status in pod.status.container_statuses or []:
                if status.state and status.state.terminated:
                    self.terminated = status.state.terminated
            if event["type"] == "DELETED":
                self.gone_at = time.monotonic()
                w.stop()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


def test_a_deleted_pod_leaves_the_world_within_its_grace_period(
    job: Job, control_plane: ControlPlane, edl_images: dict[str, str]
) -> None:
    _create(job, control_plane, edl_images["trainer"], replicas=2)
    job.training(2, 0, 5)
    victim = wait_for(
        lambda: ps[-1] if len(ps := _running(job)) == 2 else None,
        timeout_s=60,
        what="2 trainer pods ready",
        describe=job.logs,
    )
    last = _LastStatus(job.api, job.namespace, victim.metadata.name)
    assert last.watching.wait(60), "the watch on the pod never opened"
    t0 = time.monotonic()
    client.CoreV1Api(job.api).delete_namespaced_pod(victim.metadata.name, job.namespace)
    job.scale(1)  # the ReplicaSet's replacement, if made already, goes (unready, newest)

    def without_it() -> bool:
        hosts = {m["host"] for m in job.members()}
        return bool(hosts) and victim.status.pod_ip not in hosts

    wait_for(without_it, timeout_s=GRACE_S + 30, what="the world without it", describe=job.logs)
    left_after = time.monotonic() - t0
    last.join(GRACE_S + 60)
    print(f"delete -> world without it: {left_after:.2f} s (grace {GRACE_S} s)")
    # Within its grace period, told by the kubelet rather than by the test's clock: past the
    # grace the kubelet SIGKILLs the container (exit 137); an agent that left on SIGTERM exits 0.
    assert last.gone_at is not None, "the pod was not deleted"
    assert last.terminated is not None and last.terminated.exit_code == 0, last.terminated
    job.training(1, 0, 1)
    job.finish()
