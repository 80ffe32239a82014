"""How a job ends, its pods run by real kubelets from EDL's trainer image, as `kubectl` shows it.

The digits job is a Deployment `digits-trainer` of `localhost/edl-trainer`
(tests/e2e/harness/kubelet_trainer.py: host network, one trainer per node) whose agents run
`--on-finished scale-to-zero` as ServiceAccount `edl-trainer` (labelled with its job) holding
exactly the Role of manifests/examples/digits-trainer (names limited by `resourceNames`, no
write on the Deployment but its scale subresource), under the trainers'
ValidatingAdmissionPolicy of manifests/base. The agents speak with the projected token the
kubelet gives their pod, no kubeconfig: least privilege with a real pod's token.

* A job that trains to its end: while it runs, one `kubectl get` of its world ConfigMap shows
  its phase, world size, step, progress and ETA; then the Deployment goes to 0 replicas, its
  pods are deleted, the world ConfigMap is labelled `state=finished` and `phase=Succeeded`
  with the step, one Event `JobFinished` says so, and the real HPA reports it does not act on a
  target at 0 (ScalingActive False, ScalingDisabled) and leaves it there.
* A script that always fails: the kubelet restarts the container (its CrashLoopBackOff delays,
  10 s then 20 s), the crashes are counted in the world ConfigMap; over the budget the job is
  Failed: the Deployment at 0, its pods deleted, the ConfigMap `state=failed`, `phase=Failed`,
  one Warning Event `JobFailed` naming the exit statuses and the error line.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from agent.trainer.step_gate import StepGate
from tests.e2e.harness import trainer_policy
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import WorldWatch
from tests.e2e.harness.incluster import example_objects
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.e2e.harness.kubelet_trainer import (
    SHARED,
    container_origins,
    log_tails,
    prepare_namespace,
    remove_job,
    shared_folder,
    started_from,
    trainer_deployment,
    trainer_pods,
)
from tests.e2e.harness.session import Kubectl
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.kubelet]

DEPLOYMENT = "digits-trainer"
WORLD_CM = "edl-digits-world"
STATE = "edl.paddlepaddle.org/state"
PHASE = "edl.paddlepaddle.org/phase"
SCALE_TO_ZERO = ("--on-finished", "scale-to-zero")
TRAIN = ["python", "-m", "examples.train_digits_elastic", "--epochs", "3", "--global-batch",
         "64", "--seed", "3", "--step-sleep", "0.2", "--result", f"{SHARED}/result.json",
         "--step-gate", f"{SHARED}/step-gate"]  # fmt: skip
"""69 steps; the test holds the job below `HELD_BELOW` at its step gate while it looks at it
running."""
HELD_BELOW = 50
BUDGET = 2
"""Three crashes fail the job: the kubelet's back-off before the 2nd and 3rd is 10 s + 20 s."""
ERROR = "ValueError: the learning rate is not a number"
FAILING = ["python", "-c", f"raise ValueError({ERROR.split(': ', 1)[1]!r})"]
ANNOTATION = r".metadata.annotations.edl\.paddlepaddle\.org"
COLUMNS = ",".join(
    [
        "NAME:.metadata.name",
        f"PHASE:{ANNOTATION}/phase",
        f"WORLD:{ANNOTATION}/world-size",
        f"STEP:{ANNOTATION}/global-step",
        f"PROGRESS:{ANNOTATION}/progress",
        f"ETA:{ANNOTATION}/eta",
    ]
)
"""The custom columns docs/agent.md documents (a subset)."""


def hpa() -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": DEPLOYMENT},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": DEPLOYMENT},
            "minReplicas": 2,
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "samples_per_second"},
                        "target": {"type": "AverageValue", "averageValue": "1M"},
                    },
                }
            ],
        },
    }


@dataclass
class Job:
    """One test's namespace, the trainer image in its nodes, a shared hostPath folder."""

    api: client.ApiClient
    namespace: str
    kubectl: Kubectl
    cp: ControlPlane
    image: str
    shared: Path

    def create(self, replicas: int, agent_args: tuple[str, ...], trainer: list[str]) -> None:
        body = trainer_deployment(
            self.image, self.shared, self.cp, replicas=replicas, name=DEPLOYMENT,
            agent_args=agent_args, trainer=trainer,
        )  # fmt: skip
        client.AppsV1Api(self.api).create_namespaced_deployment(self.namespace, as_body(body))

    def get(self, *args: str) -> str:
        return self.kubectl("-n", self.namespace, "get", *args)

    def logs(self) -> str:
        """The trainers' last log lines and their containers, for a failed wait."""
        pods = trainer_pods(self.api, self.namespace)
        return "\n".join(container_origins(pods) + log_tails(self.api, pods))

    def started_by_the_kubelets(self, replicas: int) -> list[Any]:
        """Waits (bounded) for `replicas` pods whose container the kubelets started; prints
        which containers, from which image."""

        def started() -> list[Any] | None:
            pods = trainer_pods(self.api, self.namespace)
            ids = [s.container_id for p in pods for s in p.status.container_statuses or []]
            return pods if len(pods) == replicas and len(ids) == replicas and all(ids) else None

        pods = wait_for(started, timeout_s=180, what=f"{replicas} containers started",
                        describe=self.logs)  # fmt: skip
        started_from(pods, self.image)  # by a kubelet, from EDL's image
        return pods

    def retired(self) -> client.V1Deployment:
        """Waits (bounded) for the Deployment at 0 replicas, then its pods deleted."""
        apps, core = client.AppsV1Api(self.api), client.CoreV1Api(self.api)

        def at_zero() -> client.V1Deployment | None:
            d = apps.read_namespaced_deployment(DEPLOYMENT, self.namespace)
            return d if d.spec.replicas == 0 else None

        d = wait_for(at_zero, timeout_s=240, what="the Deployment at 0", describe=self.logs)
        wait_for(
            lambda: not core.list_namespaced_pod(self.namespace).items,
            timeout_s=90,
            what="the trainer pods deleted",
            describe=self.logs,
        )
        shown = self.get("deploy", DEPLOYMENT)
        assert "0/0" in shown, shown
        return d

    def events(self, reason: str) -> list[Any]:
        return [
            e for e in client.CoreV1Api(self.api).list_namespaced_event(self.namespace).items
            if e.reason == reason and e.involved_object.name == DEPLOYMENT
        ]  # fmt: skip


def _token(kubeconfig: Path) -> str:
    (user,) = yaml.safe_load(kubeconfig.read_text())["users"]
    return str(user["user"]["token"])


@pytest.fixture
def job(
    kubelet_node_group: KubeletNodeGroup,
    edl_images: dict[str, str],
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    kubectl: Kubectl,
    tmp_path: Path,
) -> Iterator[Job]:
    """A namespace with the example's ServiceAccount (labelled with its job) and Role, under
    the trainers' policy (installed, and seen enforced for that ServiceAccount's token)."""
    image = edl_images["trainer"]
    took = kubelet_node_group.import_image(image)
    print(f"imported {image} into the nodes (s): {took}")
    ns = f"kubelet-job-end-{uuid.uuid4().hex[:6]}"
    (sa,) = example_objects(ns, ("ServiceAccount",))
    (role,) = example_objects(ns, ("Role",))
    kubeconfig = prepare_namespace(
        kube_api, control_plane, kubectl, ns, tmp_path,
        rules=role["rules"], sa_labels=sa["metadata"]["labels"],
    )  # fmt: skip
    made = Job(kube_api, ns, kubectl, control_plane, image, shared_folder(tmp_path / "shared"))
    try:
        with trainer_policy.installed(kube_api):
            token = trainer_policy.token_client(control_plane, _token(kubeconfig))
            probe = client.CoreV1Api(token)
            policy_probe = as_body({"metadata": {"name": "edl-policy-probe"}})
            trainer_policy.enforced(
                lambda: probe.create_namespaced_config_map(ns, policy_probe, dry_run="All")
            )
            yield made
    finally:
        print(made.logs())
        remove_job(kube_api, ns, DEPLOYMENT, grace_s=30)


def test_a_job_shows_its_progress_then_finishes_at_zero_replicas_and_the_hpa_lets_it_be(
    job: Job,
) -> None:
    core = client.CoreV1Api(job.api)
    autoscaling = client.AutoscalingV2Api(job.api)
    gate = StepGate(job.shared / "step-gate")
    gate.allow(0)
    (job.shared / "step-gate").chmod(0o644)
    watch = WorldWatch(core, job.namespace, job.shared / "ledger", gate=gate)
    job.create(2, SCALE_TO_ZERO, TRAIN)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(job.namespace, as_body(hpa()))
    pods = job.started_by_the_kubelets(2)
    assert len({p.spec.node_name for p in pods}) == 2  # one trainer per node
    wait_for(
        lambda: watch.training_at(2, 0, 5),
        timeout_s=240,
        what="a world of 2 training (held at the step gate after)",
        describe=job.logs,
    )

    def columns() -> dict[str, str]:
        out = job.get("cm", "-l", "edl.paddlepaddle.org/job", "-o", f"custom-columns={COLUMNS}")
        head, *rows = out.splitlines()
        return dict(zip(head.split(), rows[0].split(), strict=True)) if rows else {}

    seen: list[dict[str, str]] = []

    def in_phase(phase: str) -> dict[str, str] | None:
        row = columns()
        if not seen or seen[-1] != row:
            seen.append(row)  # the rows that changed, for a failure's message
        return row if row.get("PHASE") == phase and row.get("ETA", "-") != "-" else None

    def running_with_eta() -> dict[str, str] | None:
        # the job moves on a few steps at a time, never to its end: its ETA comes from the
        # rate of the last minutes, which a job held still for long does not have
        gate.allow(max(gate.allowed(), min(watch.global_step() + 4, HELD_BELOW)))
        return in_phase("Running")

    running = wait_for(
        running_with_eta,
        timeout_s=150,
        what="kubectl get showing a Running job with an ETA",
        describe=lambda: f"kubectl get rows: {seen}\n{job.logs()}",
    )
    assert running["NAME"] == WORLD_CM and running["WORLD"] == "2"
    assert running["PROGRESS"].endswith("%") and 0 < float(running["PROGRESS"][:-1]) < 100
    assert 0 < int(running["STEP"]) <= gate.allowed()
    assert running["ETA"][-1] == "s"  # a Kubernetes duration: 45s, 2m3s
    gate.allow_all()
    ended: list[dict[str, str]] = []

    def reported_end() -> dict[str, str] | None:
        row = in_phase("Succeeded")
        if row is not None:
            ended.append(row)
        return row if row is not None and row["PROGRESS"] != "-" else None

    done = wait_for(
        reported_end,
        timeout_s=240,
        what="kubectl get showing the job Succeeded, with its last report",
        describe=job.logs,
    )
    assert done["PROGRESS"] == "100.0%" and done["ETA"] == "0s"
    # before the last report lands: never a running figure beside Succeeded
    assert all(r["PROGRESS"] in ("-", "100.0%") and r["ETA"] == "0s" for r in ended), ended
    record = watch.record()
    assert record.get("finished") is True, record
    step = record.get("finished_at_step")
    assert isinstance(step, int) and step > 0  # the digits example reports its last step

    d = job.retired()
    world = core.read_namespaced_config_map(WORLD_CM, job.namespace).metadata
    assert (world.labels or {}).get(STATE) == "finished"
    assert (world.annotations or {})["edl.paddlepaddle.org/finished-at-step"] == str(step)
    shown = job.get("cm", WORLD_CM, "-L", STATE, "-L", PHASE)
    assert "finished" in shown and "Succeeded" in shown, shown
    events = job.events("JobFinished")
    assert len(events) == 1, [e.message for e in events]
    assert events[0].message == (
        f"job digits finished at step {step}; scaled to 0 replicas to free its resources"
    )
    assert events[0].involved_object.uid == d.metadata.uid

    def hpa_disabled() -> bool:
        status = autoscaling.read_namespaced_horizontal_pod_autoscaler(
            DEPLOYMENT, job.namespace
        ).status
        return any(
            c.type == "ScalingActive" and c.status == "False" and c.reason == "ScalingDisabled"
            for c in status.conditions or []
        )

    wait_for(
        hpa_disabled,
        timeout_s=90,
        what="the HPA reporting ScalingDisabled for a target at 0",
        describe=lambda: job.kubectl("-n", job.namespace, "describe", "hpa", DEPLOYMENT),
    )
    # The HPA has synced at 0 (the condition above) and left the Deployment there.
    d = client.AppsV1Api(job.api).read_namespaced_deployment(DEPLOYMENT, job.namespace)
    assert d.spec.replicas == 0


def test_a_script_that_always_fails_is_restarted_by_the_kubelet_then_failed_at_zero_replicas(
    job: Job,
) -> None:
    core = client.CoreV1Api(job.api)
    job.create(1, (*SCALE_TO_ZERO, "--failure-budget", str(BUDGET)), FAILING)
    (pod,) = job.started_by_the_kubelets(1)
    restarts: list[int] = []

    def restarted_or_gone() -> bool:
        try:
            p = core.read_namespaced_pod(pod.metadata.name, job.namespace)
        except client.ApiException as e:
            return bool(e.status == 404)
        statuses = p.status.container_statuses or []
        restarts.extend(s.restart_count for s in statuses)
        return any(s.restart_count >= BUDGET for s in statuses)

    # the kubelet restarts the crashed container (CrashLoopBackOff), until the job is failed
    wait_for(restarted_or_gone, timeout_s=180, what=f"the container restarted {BUDGET} times",
             describe=job.logs)  # fmt: skip
    assert max(restarts, default=0) >= BUDGET, restarts
    job.retired()
    shown = job.get("cm", WORLD_CM, "-L", STATE, "-L", PHASE)
    assert "failed" in shown and "Failed" in shown, shown
    events = job.events("JobFailed")
    assert len(events) == 1, [e.message for e in events]
    (event,) = events
    message = event.message or ""
    assert event.type == "Warning"
    assert message.startswith(
        f"job digits failed after {BUDGET + 1} trainer failures over its budget; last: "
    )
    # every failure's error line; the newest with its whole tail (where, then why)
    assert message.count(ERROR) == BUDGET + 1, message
    assert "status 1: Traceback (most recent call last): | " in message
    shown = job.get("events", "--field-selector", "reason=JobFailed")
    assert "JobFailed" in shown and "Warning" in shown, shown
