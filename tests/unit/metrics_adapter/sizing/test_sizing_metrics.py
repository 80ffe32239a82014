"""The sizer's per-job series on /metrics follow the jobs of each plan."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from edl_sizing import Resources, SizingPolicy
from edl_sizing.cluster import Job
from edl_sizing.decision import Plan
from edl_sizing.sizing_round import fallback_plan
from metrics_adapter.sizing.metrics import SizingMetrics


def desired(registry: CollectorRegistry) -> dict[str, float]:
    """``deployment`` label -> the value of edl_adapter_sizing_desired_replicas."""
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("edl_adapter_sizing_desired_replicas{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('deployment="')[1].split('"')[0]] = float(value)
    return out


def plan_of(**replicas: int) -> Plan:
    jobs = [Job("ml", name, Resources(cpu=1), n, 1, 8) for name, n in replicas.items()]
    return fallback_plan(jobs, SizingPolicy(), 0.0)


def test_a_job_that_goes_and_comes_back_has_its_series_again() -> None:
    registry = CollectorRegistry()
    metrics = SizingMetrics(registry)
    metrics.publish(plan_of(a=2, b=3), {})
    assert desired(registry) == {"a": 2.0, "b": 3.0}
    metrics.publish(plan_of(a=4), {})
    assert desired(registry) == {"a": 4.0}
    metrics.publish(plan_of(a=4, b=5), {})
    assert desired(registry) == {"a": 4.0, "b": 5.0}
    metrics.publish(plan_of(a=4, b=5), {"ml/b": "renamed"})
    text = generate_latest(registry).decode()
    assert 'job="renamed"' in text
    assert 'job="b",deployment="b"' not in text
