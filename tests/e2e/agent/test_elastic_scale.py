"""Elastic PyTorch digits training on the real control plane, `kubectl scale` 1 -> 3 -> 2 -> 1.

Every pod of the trainer Deployment runs `edl-agent run --elastic --membership kubernetes`
around PyTorch's elastic digits example (`examples.train_digits_torch_elastic`); the agents
agree on a world through Leases and the `edl-digits-world` ConfigMap, reaching kube-apiserver
as ServiceAccount `edl-trainer` (a token kubeconfig, RBAC as in docs/elastic.md). The test
scales the Deployment with `kubectl`, the ReplicaSet creates and deletes pods, the pod runner
starts and SIGTERMs their processes, and after each step the test waits (bounded) for a new
generation of the expected size to train. Then, as in tests/integration/agent/
test_elastic_digits.py: the sample ledger shows every sample of every epoch exactly once in
the final lineage, the restored global step never went back, and the accuracy is within 1
point of a one-process run of the same seed. Once the job is done, the agents stay up idle
(the default `--on-finished idle`: a Deployment restarts a container that exits, even with
0), the world record says finished, and a pod added after the end neither trains nor fails.

The Paddle cases (`EDL_REINIT` auto and process) run on the real kubelets
(tests/e2e/agent/test_kubelet_elastic.py); PyTorch stays here on the pod runner because the
kubelet nodes get the Paddle trainer image only: `edl-trainer-torch` is 3.7 GB, imported
into every node of every kubelet session.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import pytest
from kubernetes import client

from agent.protocol.control import Timings
from agent.trainer.ledger import verify
from agent.trainer.step_gate import StepGate
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import (
    EPOCHS,
    SERVICE_ACCOUNT,
    STEPS_PER_EPOCH,
    TRAIN_ARGS,
    WorldWatch,
    elastic_container,
    grant_agent_access,
    reap_trainers,
)
from tests.e2e.harness.scale_checks import Pauses, finished_pods_idle, goes_through
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import METRICS_PORT, create_trainer_job
from tests.support.digits_job import NUM_TRAIN, SCRIPTS, reference_accuracy
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.mark.parametrize(("framework", "reinit"), [("torch", "auto")])
def test_kubectl_scale_1_3_2_1_trains_every_sample_once(
    e2e_ns: E2ENamespace,
    kubectl: Kubectl,
    control_plane: ControlPlane,
    tmp_path: Path,
    framework: str,
    reinit: str,
) -> None:
    """`auto`: survivors re-initialise in-process where the framework allows (PyTorch's
    restart path is covered by tests/integration/agent/test_elastic_digits.py)."""
    ns = e2e_ns.name
    kubeconfig = grant_agent_access(
        ns, e2e_ns.api, kubectl, control_plane, tmp_path / "agent.kubeconfig"
    )
    # The job holds at its step gate between the scales (the watch opens it as far as each
    # awaited world needs), so it cannot end before the last scale, however slow a rescale.
    gate = StepGate(tmp_path / "step-gate")
    gate.allow(0)
    create_trainer_job(
        e2e_ns.api,
        ns,
        e2e_ns.load_dir,
        replicas=1,
        container=elastic_container(
            tmp_path, kubeconfig, reinit, SCRIPTS[framework], step_gate=gate
        ),
        service_account=SERVICE_ACCOUNT,
    )
    watch = WorldWatch(client.CoreV1Api(e2e_ns.api), ns, tmp_path / "ledger", gate=gate)
    logs = e2e_ns.runner.log_tails
    pauses = Pauses(METRICS_PORT, lambda: list(e2e_ns.runner.running().values()))
    steps: list[str] = []

    def scale(replicas: int) -> None:
        kubectl("-n", ns, "scale", "deployment/trainer", f"--replicas={replicas}")

    try:
        gen = wait_for(
            lambda: watch.training_at(1, 0, 5),
            timeout_s=90,
            what="a world of 1 training",
            describe=logs,
        )
        pauses.last(wait_for(lambda: pauses.agree(1, gen), timeout_s=90, what="metrics of 1"))
        for size in (3, 2, 1):
            before = watch.global_step()
            t0 = time.monotonic()
            scale(size)
            gen = wait_for(
                functools.partial(watch.training_at, size, gen, 8 if size > 1 else 1),
                timeout_s=90,
                what=f"a world of {size} training (after generation {gen})",
                describe=logs,
            )
            took = time.monotonic() - t0
            seen = wait_for(
                functools.partial(pauses.agree, size, gen),
                timeout_s=90,
                what=f"every agent exporting world_size {size}, generation {gen}",
                describe=logs,
            )
            steps.append(
                f"-> {size}: generation {gen}, trained {took:.1f} s after the scale "
                f"(global step {before} then), pause {pauses.last(seen):.2f} s"
            )
            print(steps[-1])
        gate.allow_all()  # the scales are done: the job trains to its end
        result = tmp_path / "result.json"
        wait_for(result.exists, timeout_s=150, what="the job to finish", describe=logs)
        final = json.loads(result.read_text())
        finished = wait_for(
            lambda: watch.record() if watch.record().get("finished") else None,
            timeout_s=30,
            what="the world record marked finished",
            describe=logs,
        )
        finished_pods_idle(
            lambda: list(e2e_ns.runner.running().values()), METRICS_PORT, scale, watch, logs
        )
    finally:
        print(f"world history (s, generation, size): {watch.history}")
        try:
            scale(0)  # the agents leave; the namespace goes afterwards
        finally:
            reap_trainers(tmp_path, SCRIPTS[framework])

    report = verify(tmp_path / "ledger")
    assert report.problems(NUM_TRAIN, EPOCHS) == []
    # Each scale reaches its size. On the way up a joiner ready later than its peer may train a
    # world of its own (the join debounce batches a burst, not pods started seconds apart on a
    # loaded machine): sizes between two targets, moving toward the next, never beyond it.
    assert goes_through(watch.sizes, [1, 3, 2, 1]), watch.history
    assert len(steps) == 3
    assert final["world_size"] == 1
    assert final["global_step"] == report.steps == EPOCHS * STEPS_PER_EPOCH
    assert finished["finished_at_step"] == final["global_step"]
    restores = [report.restores[g] for g in report.generations]
    assert restores == sorted(restores)  # the global step never went back
    reference = reference_accuracy(tmp_path, TRAIN_ARGS, SCRIPTS[framework])
    print(
        f"generations {report.generations} restored at {restores}; "
        f"rolled back {report.rolled_back_steps}; "
        f"accuracy {final['accuracy']:.4f} vs one process {reference:.4f}"
    )
    assert abs(final["accuracy"] - reference) <= 0.01
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors
    timings = [
        Timings.from_json(p.read_text()) for p in tmp_path.glob("members/*/control/timings-*")
    ]
    assert {t.reinit for t in timings} == ({"in-process"} if reinit == "auto" else {"process"})
    assert {t.framework for t in timings} == {framework}


def test_goes_through_allows_an_intermediate_world_and_nothing_else() -> None:
    assert goes_through([1, 3, 2, 1], [1, 3, 2, 1])
    assert goes_through([1, 2, 3, 2, 1], [1, 3, 2, 1])
    assert not goes_through([1, 3, 1], [1, 3, 2, 1])  # a target skipped
    assert not goes_through([1, 4, 3, 2, 1], [1, 3, 2, 1])  # overshoot
    assert not goes_through([1, 3, 2, 3, 2, 1], [1, 3, 2, 1])  # back up on the way down
    assert not goes_through([1, 3, 2, 1, 2], [1, 3, 2, 1])
