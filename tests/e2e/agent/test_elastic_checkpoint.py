"""`kubectl delete pod` of every trainer pod on the real control plane: the job resumes.

A 2-replica elastic Deployment (as in test_elastic_scale.py: `edl-agent run --elastic
--membership kubernetes` as the container command, Leases and the world ConfigMap through
kube-apiserver) checkpoints every few steps. The test deletes every trainer pod at once
(what a node drain, a cluster upgrade or a whole-job preemption does), the ReplicaSet creates
new pods with new names, and their agents, finding no member with training state, restore
from the newest checkpoint. The pod runner runs pods as host processes and mounts nothing, so
the ReadWriteMany PersistentVolumeClaim is modelled by what it gives the pods: one host
directory that every pod process (old and new) sees at the same path, here passed as
``EDL_CHECKPOINT_URL``. Then: the ledger shows every sample of every epoch exactly once in
the final lineage, with the restore from the checkpoint in it, and the accuracy is within 1
point of a one-process run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.local import LocalDirectory
from agent.trainer.ledger import verify
from agent.trainer.step_gate import StepGate
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import (
    JOB,
    SERVICE_ACCOUNT,
    WorldWatch,
    elastic_container,
    grant_agent_access,
    reap_trainers,
)
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import create_trainer_job
from tests.support.digits_job import NUM_TRAIN, SCRIPTS, reference_accuracy
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(360), pytest.mark.slow]

EPOCHS = 5
STEPS = EPOCHS * -(-NUM_TRAIN // 64)
TRAIN_ARGS = ["--epochs", str(EPOCHS), "--global-batch", "64", "--seed", "3"]


def shorter(container: dict[str, Any]) -> dict[str, Any]:
    """`elastic_container`'s job (built to outlast three rescales) at `EPOCHS`, 0.2 s a step."""
    command = container["command"]
    command[command.index("--epochs") + 1] = str(EPOCHS)
    command[command.index("--step-sleep") + 1] = "0.2"
    return container


def test_kubectl_delete_of_every_trainer_pod_resumes_from_the_checkpoint(
    e2e_ns: E2ENamespace, kubectl: Kubectl, control_plane: ControlPlane, tmp_path: Path
) -> None:
    ns = e2e_ns.name
    kubeconfig = grant_agent_access(
        ns, e2e_ns.api, kubectl, control_plane, tmp_path / "agent.kubeconfig"
    )
    volume = tmp_path / "claim"  # the ReadWriteMany volume every pod mounts
    # Held at its step gate until the recreated pods train: the job cannot end before the
    # deletion, however slow the machine (the watch opens the gate as each world needs).
    gate = StepGate(tmp_path / "step-gate")
    gate.allow(0)
    container = shorter(
        elastic_container(tmp_path, kubeconfig, "auto", SCRIPTS["paddle"], step_gate=gate)
    )
    container["env"] += [
        {"name": "EDL_CHECKPOINT_URL", "value": str(volume)},
        {"name": "EDL_CHECKPOINT_EVERY_STEPS", "value": "10"},
        {"name": "EDL_CHECKPOINT_EVERY_SECONDS", "value": "0"},
    ]
    create_trainer_job(
        e2e_ns.api,
        ns,
        e2e_ns.load_dir,
        replicas=2,
        container=container,
        service_account=SERVICE_ACCOUNT,
    )
    core = client.CoreV1Api(e2e_ns.api)
    watch = WorldWatch(core, ns, tmp_path / "ledger", gate=gate)
    checkpoints = Checkpoints(LocalDirectory(volume / JOB))
    logs = e2e_ns.runner.log_tails

    def checkpointed_world() -> int | None:
        trained = watch.training_at(2, 0, 25)  # first: it also opens the gate
        return trained if trained is not None and checkpoints.latest() else None

    try:
        gen = wait_for(
            checkpointed_world,
            timeout_s=150,
            what="a world of 2 training, checkpointed",
            describe=logs,
        )
        old = list(e2e_ns.runner.running())
        newest = checkpoints.latest()
        assert newest is not None and len(old) == 2
        kubectl("-n", ns, "delete", "pod", *old, "--wait=false")
        resumed = wait_for(
            lambda: watch.training_at(2, gen, 5),
            timeout_s=150,
            what="the recreated pods training in a new world of 2",
            describe=logs,
        )
        assert not set(old) & set(e2e_ns.runner.running())
        gate.allow_all()  # the deletion is done: the job trains to its end
        result = tmp_path / "result.json"
        wait_for(result.exists, timeout_s=150, what="the job to finish", describe=logs)
        final = json.loads(result.read_text())
        finished = wait_for(
            lambda: watch.record() if watch.record().get("finished") else None,
            timeout_s=30,
            what="the world record marked finished",
            describe=logs,
        )
    finally:
        try:
            kubectl("-n", ns, "scale", "deployment/trainer", "--replicas=0")
        finally:
            reap_trainers(tmp_path, SCRIPTS["paddle"])

    report = verify(tmp_path / "ledger")
    assert report.problems(NUM_TRAIN, EPOCHS) == []
    assert final["global_step"] == report.steps == STEPS == finished["finished_at_step"]
    from_checkpoint = {g: report.restores[g] for g in report.checkpoints}
    assert from_checkpoint, report.restores  # no member had state: the checkpoint did
    (first, step), *_ = sorted(from_checkpoint.items())
    assert gen < first <= resumed and step >= newest.step > 0
    print(
        f"deleted both pods in generation {gen} (newest checkpoint then: step {newest.step}); "
        f"generation {first} resumed at step {step} from {report.checkpoints[first]}; "
        f"redone {report.rolled_back_steps} steps ({report.redone_samples} samples)"
    )
    reference = reference_accuracy(tmp_path, TRAIN_ARGS, SCRIPTS["paddle"])
    assert abs(final["accuracy"] - reference) <= 0.01
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors
