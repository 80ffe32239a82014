"""The real agent and a real Paddle trainer in a pod, read by the HPA's API through kubectl."""

from __future__ import annotations

import json
from decimal import Decimal
from urllib.parse import quote

import pytest

from edl_common.quantity import parse_quantity
from tests.e2e.harness.adapter import MetricsAdapter
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import agent_container, create_trainer_job
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def test_agent_pod_metrics_reach_the_custom_metrics_api(
    e2e_ns: E2ENamespace, metrics_adapter: MetricsAdapter, kubectl: Kubectl
) -> None:
    ns = e2e_ns.name
    trainer = ["python", "-m", "examples.train_digits", "--epochs=100000"]
    job = create_trainer_job(
        e2e_ns.api, ns, e2e_ns.load_dir, replicas=1, container=agent_container(trainer)
    )
    wait_for(lambda: job.ready_replicas() == 1, timeout_s=90, what="agent pod ready")
    selector = quote("app=trainer,job=trainer")

    def metric(name: str) -> Decimal | None:
        body = json.loads(
            kubectl(
                "get",
                "--raw",
                f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/{name}"
                f"?labelSelector={selector}",
            )
        )
        values = [parse_quantity(i["value"]) for i in body["items"]]
        return values[0] if len(values) == 1 and values[0] > 0 else None

    samples = wait_for(
        lambda: metric("samples_per_second"),
        timeout_s=120,
        what="samples_per_second > 0 from the agent",
        describe=e2e_ns.runner.log_tails,
    )
    assert samples > 0
    step = wait_for(lambda: metric("step_seconds"), timeout_s=30, what="step_seconds > 0")
    assert step < 10  # a digits MLP step is milliseconds; this only checks units (seconds)
    assert not e2e_ns.runner.errors
