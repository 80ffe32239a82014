"""A job that fails and a job that runs, as `kubectl` shows them, on the real control plane.

- A script that always fails, under the example's Role (no write on the Deployment) and the
  trainers' ValidatingAdmissionPolicy: its crashes (the pod's container restarted by the pod
  runner, as a kubelet does) are counted in the job's world ConfigMap; over the budget the job
  is Failed: the Deployment at 0 replicas, its pods deleted, the ConfigMap labelled
  ``state=failed`` and ``phase=Failed``, one Warning Event ``JobFailed`` naming the exit
  statuses and the error line.
- A running job's phase, progress and ETA in one ``kubectl get`` of its world ConfigMap.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from agent.trainer.step_gate import StepGate
from tests.e2e.agent.test_finished_job import (
    DEPLOYMENT,
    SHORT,
    example_role_rules,
    example_trainer_access,
)
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import (
    SERVICE_ACCOUNT,
    elastic_container,
    grant_agent_access,
    reap_trainers,
)
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import create_trainer_job
from tests.support.digits_job import SCRIPTS
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

BUDGET = 2
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


def test_a_script_that_always_fails_ends_failed_at_zero_replicas_with_the_event(
    e2e_ns: E2ENamespace, kubectl: Kubectl, control_plane: ControlPlane, tmp_path: Path
) -> None:
    ns = e2e_ns.name
    with example_trainer_access(e2e_ns, kubectl, control_plane, tmp_path) as kubeconfig:
        container = elastic_container(tmp_path, kubeconfig, "auto", SCRIPTS["paddle"], SHORT)
        command = container["command"]
        policy = ["--on-finished", "scale-to-zero", "--failure-budget", str(BUDGET)]
        container["command"] = [*command[: command.index("--")], *policy, "--", *FAILING]
        container["env"].append({"name": "EDL_DEPLOYMENT", "value": DEPLOYMENT})
        create_trainer_job(
            e2e_ns.api, ns, e2e_ns.load_dir, name=DEPLOYMENT, replicas=1, container=container,
            service_account=SERVICE_ACCOUNT,
        )  # fmt: skip
        apps, core = client.AppsV1Api(e2e_ns.api), client.CoreV1Api(e2e_ns.api)

        def retired() -> bool:
            return bool(apps.read_namespaced_deployment(DEPLOYMENT, ns).spec.replicas == 0)

        wait_for(retired, timeout_s=200, what="the failed job's Deployment at 0",
                 describe=e2e_ns.runner.log_tails)  # fmt: skip
        wait_for(
            lambda: not core.list_namespaced_pod(ns).items,
            timeout_s=90,
            what="the trainer pods deleted",
        )
        shown = kubectl("-n", ns, "get", "deploy", DEPLOYMENT)
        assert "0/0" in shown, shown
        shown = kubectl(
            "-n", ns, "get", "cm", "edl-digits-world",
            "-L", "edl.paddlepaddle.org/state", "-L", "edl.paddlepaddle.org/phase",
        )  # fmt: skip
        assert "failed" in shown and "Failed" in shown, shown
        events = [
            e for e in core.list_namespaced_event(ns).items
            if e.reason == "JobFailed" and e.involved_object.name == DEPLOYMENT
        ]  # fmt: skip
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
        shown = kubectl("-n", ns, "get", "events", "--field-selector", "reason=JobFailed")
        assert "JobFailed" in shown and "Warning" in shown, shown


def test_kubectl_get_shows_the_phase_progress_and_eta_of_a_running_job(
    e2e_ns: E2ENamespace, kubectl: Kubectl, control_plane: ControlPlane, tmp_path: Path
) -> None:
    ns = e2e_ns.name
    kubeconfig = grant_agent_access(
        ns, e2e_ns.api, kubectl, control_plane, tmp_path / "agent.kubeconfig",
        rules=example_role_rules(),
    )  # fmt: skip
    gate = StepGate(tmp_path / "step-gate")
    gate.allow(30)  # held there: the job is still running when it is looked at
    script = SCRIPTS["torch"]
    train = [*SHORT[:1], "3", *SHORT[2:], "--step-sleep", "0.1"]
    container = elastic_container(tmp_path, kubeconfig, "auto", script, train, step_gate=gate)
    create_trainer_job(
        e2e_ns.api, ns, e2e_ns.load_dir, name=DEPLOYMENT, replicas=1, container=container,
        service_account=SERVICE_ACCOUNT,
    )  # fmt: skip

    def columns() -> dict[str, str]:
        out = kubectl("-n", ns, "get", "cm", "-l", "edl.paddlepaddle.org/job",
                      "-o", f"custom-columns={COLUMNS}")  # fmt: skip
        head, *rows = out.splitlines()
        return dict(zip(head.split(), rows[0].split(), strict=True)) if rows else {}

    try:

        def in_phase(phase: str) -> dict[str, str] | None:
            row = columns()
            return row if row.get("PHASE") == phase and row.get("ETA", "-") != "-" else None

        running = wait_for(
            lambda: in_phase("Running"),
            timeout_s=240,
            what="kubectl get showing a Running job with an ETA",
            describe=e2e_ns.runner.log_tails,
        )
        assert running["NAME"] == "edl-digits-world" and running["WORLD"] == "1"
        assert running["PROGRESS"].endswith("%") and 0 < float(running["PROGRESS"][:-1]) < 100
        assert 0 < int(running["STEP"]) <= 30
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
            describe=e2e_ns.runner.log_tails,
        )
        assert done["PROGRESS"] == "100.0%" and done["ETA"] == "0s"
        # before the last report lands: never a running figure beside Succeeded
        assert all(r["PROGRESS"] in ("-", "100.0%") and r["ETA"] == "0s" for r in ended), ended
        shown = kubectl("-n", ns, "get", "cm", "-l", "edl.paddlepaddle.org/job",
                        "-L", "edl.paddlepaddle.org/phase")  # fmt: skip
        assert "Succeeded" in shown, shown
    finally:
        reap_trainers(tmp_path, script)
