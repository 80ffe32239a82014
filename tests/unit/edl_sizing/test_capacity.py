"""Capacity: what fits where (taints, cordons, readiness, GPUs, pods without requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edl_sizing import (
    CapacityError,
    Job,
    Node,
    Pod,
    Resources,
    Taint,
    Toleration,
    decide,
    snapshot_from_dict,
)
from edl_sizing.capacity import snapshot_from_yaml

GI = 2**30


def one_job(**kw: object) -> Job:
    defaults: dict[str, object] = {
        "worker": Resources(cpu=1, memory=GI),
        "replicas": 1,
        "min_replicas": 1,
        "max_replicas": 8,
    }
    defaults.update(kw)
    return Job("ns", "job", **defaults)  # type: ignore[arg-type]


def test_resources_parse_kubernetes_quantities() -> None:
    r = Resources.parse({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2", "pods": "110"})
    assert r == Resources(cpu=0.5, memory=GI, gpu=2)
    assert Resources.parse(None) == Resources()
    with pytest.raises(ValueError, match="cpu"):
        Resources.parse({"cpu": "lots"})
    with pytest.raises(ValueError, match="negative"):
        Resources.parse({"memory": "-1Gi"})


def test_fits_tolerates_float_sums() -> None:
    assert (Resources(cpu=0.1) + Resources(cpu=0.2)).fits_in(Resources(cpu=0.3))
    assert not Resources(cpu=0.31).fits_in(Resources(cpu=0.3))
    assert not Resources(gpu=1).fits_in(Resources(cpu=64, memory=256 * GI))


def test_tolerations_match_like_the_scheduler() -> None:
    taint = Taint("dedicated", "web", "NoSchedule")
    assert Toleration("dedicated", "Equal", "web").tolerates(taint)
    assert Toleration("dedicated", "Exists").tolerates(taint)
    assert Toleration(operator="Exists").tolerates(taint)
    assert not Toleration("dedicated", "Equal", "db").tolerates(taint)
    assert not Toleration("dedicated", "Exists", effect="NoExecute").tolerates(taint)


def test_free_room_is_allocatable_minus_bound_requests_minus_headroom() -> None:
    from edl_sizing import SizingPolicy

    nodes = [Node("a", Resources(cpu=4, memory=8 * GI)), Node("b", Resources(cpu=2, memory=4 * GI))]
    pods = [
        Pod("web", "w1", Resources(cpu=1.5, memory=GI), node="a"),
        Pod("web", "w2", Resources(cpu=1, memory=GI)),  # pending, priority 0 < job's 10
    ]
    plan = decide(
        nodes,
        pods,
        [one_job(priority=10, max_replicas=1)],
        SizingPolicy(headroom=Resources(cpu=0.5)),
    )
    assert plan.allocatable == Resources(cpu=6, memory=12 * GI)
    assert plan.free == Resources(cpu=6 - 1.5 - 1.0, memory=11 * GI)
    assert plan.protected == ()


def test_cordoned_not_ready_and_tainted_nodes_offer_no_room() -> None:
    nodes = [
        Node("cordoned", Resources(cpu=8, memory=8 * GI), schedulable=False),
        Node("notready", Resources(cpu=8, memory=8 * GI), ready=False),
        Node("tainted", Resources(cpu=8, memory=8 * GI), taints=(Taint("gpu-only"),)),
        Node("soft", Resources(cpu=1, memory=8 * GI), taints=(Taint("x", "", "PreferNoSchedule"),)),
    ]
    plan = decide(nodes, [], [one_job(replicas=0)])
    d = plan.jobs["ns/job"]
    assert d.desired == 1 and d.nodes == {"soft": 1}
    assert plan.allocatable == Resources(cpu=9, memory=16 * GI)  # cordoned/not ready left out
    tolerant = one_job(replicas=0, tolerations=(Toleration("gpu-only", "Exists"),))
    assert decide(nodes, [], [tolerant]).jobs["ns/job"].nodes == {"soft": 1, "tainted": 1}


def test_gpu_job_on_nodes_without_gpus_waits() -> None:
    nodes = [Node("cpu-only", Resources(cpu=64, memory=256 * GI))]
    job = one_job(worker=Resources(cpu=4, memory=16 * GI, gpu=1), replicas=2, min_replicas=1)
    d = decide(nodes, [], [job]).jobs["ns/job"]
    assert (d.desired, d.limited_by.value) == (1, "waiting")
    assert "1 GPU" in d.message


def test_gpu_job_uses_gpu_nodes() -> None:
    nodes = [
        Node("cpu", Resources(cpu=64, memory=256 * GI)),
        Node("gpu", Resources(cpu=16, memory=64 * GI, gpu=2)),
    ]
    job = one_job(worker=Resources(cpu=4, memory=16 * GI, gpu=1), replicas=1, max_replicas=4)
    plan = decide(nodes, [], [job])
    assert plan.jobs["ns/job"].nodes == {"gpu": 2}


def test_pods_without_requests_take_no_room() -> None:
    nodes = [Node("a", Resources(cpu=2, memory=4 * GI))]
    pods = [Pod("web", f"besteffort-{i}", Resources(), node="a") for i in range(50)]
    plan = decide(nodes, pods, [one_job(replicas=1, observed={1: 10.0})])
    assert plan.jobs["ns/job"].desired == 2


def test_a_job_whose_worker_requests_nothing_falls_back_to_its_replicas() -> None:
    nodes = [Node("a", Resources(cpu=2, memory=4 * GI))]
    d = decide(nodes, [], [one_job(worker=Resources(), replicas=3)]).jobs["ns/job"]
    assert (d.desired, d.limited_by.value) == (3, "fallback")
    assert "requests no CPU" in d.message


def test_static_source_reads_the_documented_yaml(tmp_path: Path) -> None:
    path = tmp_path / "capacity.yaml"
    path.write_text(
        """
nodes:
  - name: slots
    allocatable: {cpu: "4", memory: 8Gi}
    taints: [{key: dedicated, value: web, effect: NoSchedule}]
pods:
  - {namespace: web, name: web-0, requests: {cpu: "1"}, priority: 1000, node: slots}
jobs:
  - namespace: default
    name: digits
    replicas: 2
    worker: {cpu: "1"}
    minReplicas: 1
    maxReplicas: 4
    tolerations: [{key: dedicated, operator: Exists}]
"""
    )
    snap = snapshot_from_yaml(path.read_text(), str(path))
    assert snap.nodes[0].allocatable == Resources(cpu=4, memory=8 * GI)
    assert snap.pods[0].node == "slots" and snap.pods[0].priority == 1000
    job = snap.jobs[0]
    assert (job.key, job.replicas, job.max_replicas, job.worker) == (
        "default/digits",
        2,
        4,
        Resources(cpu=1),
    )
    d = decide(snap.nodes, snap.pods, snap.jobs).jobs["default/digits"]
    # Its 2 workers fit beside web-0; a third would exceed 2x the largest size measured (none).
    assert (d.desired, d.limited_by.value, d.nodes) == (2, "hold_off", {"slots": 2})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a mapping"),
        ({"node": []}, "unknown keys"),
        ({"nodes": {"a": 1}}, "must be a list"),
        ({"nodes": [{"allocatable": {}}]}, r"nodes\[0\]: 'name'"),
        ({"jobs": [{"name": "j", "worker": {"cpu": "x"}}]}, r"jobs\[0\]: cpu"),
        ({"pods": [{"name": "p", "requests": "1"}]}, "resource map"),
    ],
)
def test_static_source_errors_name_the_entry(doc: object, message: str) -> None:
    with pytest.raises(CapacityError, match=message):
        snapshot_from_dict(doc, "capacity.yaml")


def test_the_sizing_defaults_agree_with_the_adapters_default_catalogue() -> None:
    """The simulator observes throughput over the window the adapter's catalogue measures."""
    from edl_sizing import defaults
    from metrics_adapter.scraping.catalogue import MetricCatalogue

    assert MetricCatalogue.default().max_window_seconds == defaults.THROUGHPUT_WINDOW_S
