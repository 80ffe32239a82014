"""A finished job gives its hardware back, on the real control plane.

The digits job runs as the example ships it: Deployment `digits-trainer`, two pods of
`edl-agent run --elastic --membership kubernetes --on-finished scale-to-zero`, as
ServiceAccount `edl-trainer` (labelled with its job) holding exactly the Role of
manifests/examples/digits-trainer (names limited by `resourceNames`, no write on the
Deployment), under the trainers' ValidatingAdmissionPolicy of manifests/base and an HPA (min 2).
When training ends: the Deployment goes to 0 replicas, its pods are deleted, the job's world
ConfigMap carries the label `edl.paddlepaddle.org/state=finished` (what `kubectl get cm -L`
shows) with the step, one Event `JobFinished` says so, and the real HPA controller reports it
does not act on a target at 0 (ScalingActive False, ScalingDisabled) and leaves it there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.harness import trainer_policy
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.elastic_job import (
    SERVICE_ACCOUNT,
    WorldWatch,
    elastic_container,
    grant_agent_access,
    reap_trainers,
)
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import create_trainer_job
from tests.support.digits_job import SCRIPTS
from tests.support.kustomize import render
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

DEPLOYMENT = "digits-trainer"
STATE = "edl.paddlepaddle.org/state"
SHORT = ["--epochs", "1", "--global-batch", "64", "--seed", "3"]


def example_role_rules() -> list[dict[str, Any]]:
    (role,) = [d for d in render("manifests/examples/digits-trainer") if d["kind"] == "Role"]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def hpa(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": DEPLOYMENT, "namespace": namespace},
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


def test_a_finished_job_scales_its_deployment_to_zero_and_the_hpa_lets_it_be(
    e2e_ns: E2ENamespace, kubectl: Kubectl, control_plane: ControlPlane, tmp_path: Path
) -> None:
    with example_trainer_access(e2e_ns, kubectl, control_plane, tmp_path) as kubeconfig:
        _finish_and_retire(e2e_ns, kubectl, tmp_path, kubeconfig)


@contextlib.contextmanager
def example_trainer_access(
    e2e_ns: E2ENamespace, kubectl: Kubectl, control_plane: ControlPlane, tmp_path: Path
) -> Iterator[Path]:
    """The agents' kubeconfig: the example's Role, a ServiceAccount labelled with its job,
    under the trainers' ValidatingAdmissionPolicy (installed, and seen enforced)."""
    ns = e2e_ns.name
    kubeconfig = grant_agent_access(
        ns, e2e_ns.api, kubectl, control_plane, tmp_path / "agent.kubeconfig",
        rules=example_role_rules(), sa_labels={"edl.paddlepaddle.org/job": "digits"},
    )  # fmt: skip
    with trainer_policy.installed(e2e_ns.api):
        probe = client.CoreV1Api(trainer_policy.token_client(control_plane, _token(kubeconfig)))
        trainer_policy.enforced(lambda: probe.create_namespaced_config_map(
            ns, as_body({"metadata": {"name": "edl-policy-probe"}}), dry_run="All"))  # fmt: skip
        yield kubeconfig


def _token(kubeconfig: Path) -> str:
    (user,) = yaml.safe_load(kubeconfig.read_text())["users"]
    return str(user["user"]["token"])


def _finish_and_retire(
    e2e_ns: E2ENamespace, kubectl: Kubectl, tmp_path: Path, kubeconfig: Path
) -> None:
    ns = e2e_ns.name
    script = SCRIPTS["paddle"]
    container = elastic_container(tmp_path, kubeconfig, "auto", script, [*SHORT])
    command = container["command"]
    command[command.index("--") : command.index("--")] = ["--on-finished", "scale-to-zero"]
    container["env"].append({"name": "EDL_DEPLOYMENT", "value": DEPLOYMENT})
    create_trainer_job(
        e2e_ns.api, ns, e2e_ns.load_dir, name=DEPLOYMENT, replicas=2, container=container,
        service_account=SERVICE_ACCOUNT,
    )  # fmt: skip
    autoscaling = client.AutoscalingV2Api(e2e_ns.api)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(ns, as_body(hpa(ns)))
    apps, core = client.AppsV1Api(e2e_ns.api), client.CoreV1Api(e2e_ns.api)
    watch = WorldWatch(core, ns, tmp_path / "ledger")
    try:
        wait_for(
            lambda: watch.record().get("finished") is True,
            timeout_s=200,
            what="the job training to its end (world record finished)",
            describe=e2e_ns.runner.log_tails,
        )
        step = watch.record().get("finished_at_step")
        assert isinstance(step, int) and step > 0  # the digits example reports its last step

        def retired() -> client.V1Deployment | None:
            d = apps.read_namespaced_deployment(DEPLOYMENT, ns)
            return d if d.spec.replicas == 0 else None

        d = wait_for(retired, timeout_s=60, what="the Deployment at 0",
                     describe=e2e_ns.runner.log_tails)  # fmt: skip
        world = core.read_namespaced_config_map("edl-digits-world", ns).metadata
        assert (world.labels or {}).get(STATE) == "finished"
        assert (world.annotations or {})["edl.paddlepaddle.org/finished-at-step"] == str(step)
        wait_for(
            lambda: not core.list_namespaced_pod(ns).items,
            timeout_s=90,
            what="the trainer pods deleted",
        )
        shown = kubectl("-n", ns, "get", "deploy", DEPLOYMENT)
        assert "0/0" in shown, shown
        shown = kubectl("-n", ns, "get", "cm", "edl-digits-world", "-L", STATE)
        assert "finished" in shown, shown

        events = [
            e for e in core.list_namespaced_event(ns).items
            if e.reason == "JobFinished" and e.involved_object.name == DEPLOYMENT
        ]  # fmt: skip
        assert len(events) == 1, [e.message for e in events]
        assert events[0].message == (
            f"job digits finished at step {step}; scaled to 0 replicas to free its resources"
        )
        assert events[0].involved_object.uid == d.metadata.uid

        def hpa_disabled() -> bool:
            status = autoscaling.read_namespaced_horizontal_pod_autoscaler(DEPLOYMENT, ns).status
            return any(
                c.type == "ScalingActive" and c.status == "False" and c.reason == "ScalingDisabled"
                for c in status.conditions or []
            )

        wait_for(
            hpa_disabled,
            timeout_s=90,
            what="the HPA reporting ScalingDisabled for a target at 0",
            describe=lambda: kubectl("-n", ns, "describe", "hpa", DEPLOYMENT),
        )
        # The HPA has synced at 0 (the condition above) and left the Deployment there.
        assert apps.read_namespaced_deployment(DEPLOYMENT, ns).spec.replicas == 0
    finally:
        reap_trainers(tmp_path, script)
