"""Kubernetes JSON to the sizer's view: nodes, pods, trainer Deployments, annotations."""

from __future__ import annotations

from typing import Any

import pytest

from edl_sizing import Resources, decide
from metrics_adapter.sizing.kube_objects import (
    JOB_LABEL,
    MAX_WORKERS,
    MIN_MARGINAL_SPEEDUP,
    MIN_WORKERS,
    WEIGHT,
    JobDefaults,
    PriorityClassRecord,
    assemble,
    deployment_from,
    job_from,
    node_from,
    pod_from,
    priority_class_from,
    quota_from,
    timestamp,
)

GI = 2**30


def node(name: str, cpu: str = "4", **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"zone": "a"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    for key, value in extra.items():
        obj[key].update(value)
    return obj


def pod(
    name: str, labels: dict[str, str], node_name: str | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": labels,
            "creationTimestamp": "2026-05-01T12:00:00Z",
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            **spec,
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def deployment(name: str = "trainer", annotations: dict[str, str] | None = None,
               **template: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": "u-1",
            "generation": 4,
            "labels": {JOB_LABEL: "digits"},
            "annotations": {"unrelated": "x", **(annotations or {})},
            "creationTimestamp": "2026-05-01T11:00:00Z",
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "a", "resources": {"requests": {"cpu": "1"},
                                                    "limits": {"memory": "2Gi"}}},
                        {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                    ],
                    "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
                    "overhead": {"cpu": "100m"},
                    **template,
                },
            },
        },
    }  # fmt: skip


def test_node_allocatable_readiness_cordon_and_taints() -> None:
    n = node_from(
        node("n1", spec={"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]})
    )
    assert n.allocatable == Resources(cpu=4, memory=8 * GI)
    assert n.ready and not n.schedulable and n.taints[0].key == "k"
    not_ready = node("n2", status={"conditions": [{"type": "Ready", "status": "Unknown"}]})
    assert not node_from(not_ready).ready
    no_gpu = node_from(node("n3"))
    assert no_gpu.allocatable.gpu == 0
    bad = node_from(node("n4", status={"allocatable": {"cpu": "lots"}}))
    assert bad.allocatable == Resources()


def test_pod_requests_limits_init_containers_and_overhead() -> None:
    record = deployment_from(deployment())
    assert record is not None
    # containers: 1 + 0.25 CPU, 2Gi (limit stands in) + 1Gi; the init container's 2 CPUs win;
    # overhead 0.1 CPU on top.
    assert record.worker == Resources(cpu=2.1, memory=3 * GI)


def test_terminal_and_deleting_pods_do_not_count() -> None:
    assert pod_from(pod("a", {}, "n1")) is not None
    done = pod("b", {}, "n1")
    done["status"]["phase"] = "Succeeded"
    assert pod_from(done) is None
    going = pod("c", {}, "n1")
    going["metadata"]["deletionTimestamp"] = "2026-05-01T12:00:00Z"
    assert pod_from(going) is None
    besteffort = pod("d", {}, None, containers=[{"name": "c"}])
    record = pod_from(besteffort)
    assert record is not None and record.pod.requests == Resources() and record.pod.node is None


def test_annotations_with_defaults() -> None:
    record = deployment_from(deployment(annotations={MAX_WORKERS: "6", WEIGHT: "2.5"}))
    assert record is not None
    job = job_from(record, {}, JobDefaults())
    assert job.error is None
    assert (job.min_replicas, job.max_replicas, job.weight, job.min_marginal_speedup) == (
        1, 6, 2.5, 0.05)  # fmt: skip
    assert (job.namespace, job.name, job.replicas) == ("ml", "trainer", 2)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({MAX_WORKERS: "many"}, "max-workers: 'many' is not an integer"),
        ({MIN_WORKERS: "0"}, "min-workers: 0 must be at least 1"),
        ({MIN_MARGINAL_SPEEDUP: "high"}, "is not a number"),
    ],
)
def test_malformed_annotations_are_a_job_error(annotations: dict[str, str], message: str) -> None:
    record = deployment_from(deployment(annotations=annotations))
    assert record is not None
    job = job_from(record, {}, JobDefaults())
    assert job.error is not None and message in job.error


def test_contradictory_annotations_fall_back_in_the_decision() -> None:
    record = deployment_from(deployment(annotations={MIN_WORKERS: "5", MAX_WORKERS: "2"}))
    assert record is not None
    job = job_from(record, {}, JobDefaults())
    d = decide([node_from(node("n1", cpu="64"))], [], [job]).jobs["ml/trainer"]
    assert (d.desired, d.limited_by.value) == (2, "fallback")
    assert "min 5 is above max 2" in d.message


def test_priority_from_the_template_class_or_the_global_default() -> None:
    classes = {
        "high": PriorityClassRecord("high", 1000),
        "default": PriorityClassRecord("default", 7, global_default=True),
    }
    high = deployment_from(deployment(priorityClassName="high"))
    plain = deployment_from(deployment())
    missing = deployment_from(deployment(priorityClassName="nope"))
    assert high is not None and plain is not None and missing is not None
    assert job_from(high, classes, JobDefaults()).priority == 1000
    assert job_from(plain, classes, JobDefaults()).priority == 7
    assert job_from(plain, {}, JobDefaults()).priority == 0
    error = job_from(missing, classes, JobDefaults()).error
    assert error is not None and "PriorityClass 'nope' does not exist" in error
    assert priority_class_from({"metadata": {"name": "x"}, "value": 5, "globalDefault": True}) == (
        PriorityClassRecord("x", 5, True))  # fmt: skip


def test_other_deployments_are_not_jobs() -> None:
    plain = deployment()
    del plain["metadata"]["labels"][JOB_LABEL]
    assert deployment_from(plain) is None


def test_assemble_attributes_pods_to_their_job_and_finds_the_last_growth() -> None:
    d = deployment_from(deployment())
    assert d is not None
    p1 = pod("trainer-1", {"app": "trainer"}, "n1")
    p2 = pod("trainer-2", {"app": "trainer"}, None)
    p2["metadata"]["creationTimestamp"] = "2026-05-01T12:05:00Z"
    other = pod("web", {"app": "web"}, "n1")
    records = [r for r in (pod_from(p) for p in (p1, p2, other)) if r is not None]
    snap = assemble([node_from(node("n1"))], records, [d], [])
    assert [(p.name, p.job) for p in snap.pods] == [
        ("trainer-1", "ml/trainer"), ("trainer-2", "ml/trainer"), ("web", None)]  # fmt: skip
    (job,) = snap.jobs
    assert job.last_rescale == timestamp("2026-05-01T12:05:00Z")
    assert snap.job_names == {"ml/trainer": "digits"}


def test_two_deployments_with_one_job_name_are_both_refused() -> None:
    a, b = deployment_from(deployment("a")), deployment_from(deployment("b"))
    assert a is not None and b is not None
    snap = assemble([], [], [a, b], [])
    for job in snap.jobs:
        assert job.error is not None and "Deployments a, b carry" in job.error


def test_unsupported_selector_is_a_problem_not_a_crash() -> None:
    d = deployment()
    d["spec"]["selector"] = {"matchExpressions": [{"key": "x", "operator": "Weird"}]}
    record = deployment_from(d)
    assert record is not None and record.problem is not None
    assert job_from(record, {}, JobDefaults()).error is not None


def test_timestamps() -> None:
    assert timestamp("1970-01-01T00:01:00Z") == 60.0
    assert timestamp(None) == 0.0 and timestamp("yesterday") == 0.0


def test_pods_go_to_the_first_deployment_by_name_whose_selector_matches() -> None:
    def dep(name: str, selector: dict[str, Any]) -> Any:
        d = deployment(name)
        d["spec"]["selector"] = selector
        return deployment_from(d)

    deps = [
        dep("b-eq", {"matchLabels": {"app": "x"}}),
        dep("a-expr", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["t"]}]}),
        dep("c-two", {"matchLabels": {"app": "x", "role": "w"}}),
        dep("d-other", {"matchLabels": {"team": "y"}}),
    ]
    cases = {
        "p1": ({"app": "x"}, "ml/b-eq"),
        "p2": ({"app": "x", "tier": "t"}, "ml/a-expr"),  # a-expr sorts first
        "p3": ({"app": "x", "role": "w"}, "ml/b-eq"),
        "p4": ({"team": "y"}, "ml/d-other"),
        "p5": ({"app": "z"}, None),
    }
    records = [r for r in (pod_from(pod(n, labels, "n1")) for n, (labels, _) in cases.items()) if r]
    snap = assemble([], records, [d for d in deps if d is not None], [])
    assert {p.name: p.job for p in snap.pods} == {n: want for n, (_, want) in cases.items()}


def test_a_resource_quota_is_what_it_still_admits() -> None:
    quota = quota_from(
        {
            "metadata": {"namespace": "ml", "name": "compute"},
            "status": {
                "hard": {"requests.cpu": "4", "requests.nvidia.com/gpu": "8", "pods": "10",
                         "limits.memory": "64Gi", "services": "2"},
                "used": {"requests.cpu": "2500m", "requests.nvidia.com/gpu": "8", "pods": "3"},
            },
        }
    )  # fmt: skip
    assert quota is not None and (quota.namespace, quota.name) == ("ml", "compute")
    assert quota.left == {"cpu": 1.5, "gpu": 0.0, "pods": 7.0}
    assert not quota.admits(Resources(cpu=1, gpu=1))
    assert quota.admits(Resources(cpu=1))
    # a quota on nothing a worker requests (or with no status yet) limits nothing
    assert quota_from({"metadata": {}, "status": {"hard": {"services": "2"}}}) is None
    assert quota_from({"metadata": {}, "spec": {"hard": {"pods": "2"}}}) is None


def test_a_finished_job_is_not_sized_and_its_room_is_free_at_once() -> None:
    """What `edl-agent --on-finished scale-to-zero` leaves: a Deployment at 0 replicas (no
    label: the agents may not write their Deployment), and pods being deleted."""
    n1 = node_from(node("n1", cpu="4"))
    running = [pod(f"trainer-{i}", {"app": "trainer"}, "n1") for i in range(2)]
    job = deployment_from(deployment())
    assert job is not None
    before = assemble([n1], [r for r in map(pod_from, running) if r is not None], [job], [])
    plan = decide(before.nodes, before.pods, before.jobs)
    assert set(plan.jobs) == {"ml/trainer"}
    assert plan.free.cpu < 4  # two workers of 1.25 CPU hold room

    finished = deployment()
    finished["spec"]["replicas"] = 0
    assert deployment_from(finished) is None
    labelled = deployment()  # what agents before issue 37 left: still not a job
    labelled["metadata"]["labels"]["edl.paddlepaddle.org/state"] = "finished"
    assert deployment_from(labelled) is None
    unset = deployment()
    del unset["spec"]["replicas"]  # the API server defaults it to 1: a job
    assert deployment_from(unset) is not None
    for p in running:  # the ReplicaSet deletes them as soon as the scale is 0
        p["metadata"]["deletionTimestamp"] = "2026-05-01T12:10:00Z"
    after = assemble([n1], [r for r in map(pod_from, running) if r is not None], [], [])
    plan = decide(after.nodes, after.pods, after.jobs)
    assert plan.jobs == {} and plan.free.cpu == 4
