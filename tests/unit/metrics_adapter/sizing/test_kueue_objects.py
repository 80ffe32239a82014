"""Kueue's queues as the sizer reads them: room per flavor, cohorts, LocalQueues, gated pods."""

from __future__ import annotations

from typing import Any

import pytest

from edl_sizing import Node, QueueQuota, Resources, decide
from metrics_adapter.sizing.kube_objects import assemble, deployment_from, pod_from
from metrics_adapter.sizing.kueue_objects import (
    QueueUsage,
    WaitingWorkload,
    cluster_queue_from,
    cluster_queues_of,
    holding_pods,
    local_queue_from,
    queue_quotas,
    with_workloads,
    workload_from,
)

pytestmark = pytest.mark.unit

GI = 2**30


def cluster_queue(
    name: str,
    cpu: str,
    used_cpu: str = "0",
    *,
    cohort: str | None = None,
    borrowing: str | None = None,
    lending: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    cpu_limits: dict[str, Any] = {"name": "cpu", "nominalQuota": cpu}
    if borrowing is not None:
        cpu_limits["borrowingLimit"] = borrowing
    if lending is not None:
        cpu_limits["lendingLimit"] = lending
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [cpu_limits, {"name": "memory", "nominalQuota": "64Gi"}],
                        }
                    ],
                }
            ],
            **({"cohortName": cohort} if cohort else {}),
            **spec,
        },
        "status": {
            "flavorsReservation": [
                {
                    "name": "default",
                    "resources": [
                        {"name": "cpu", "total": used_cpu, "borrowed": "0"},
                        {"name": "memory", "total": "0", "borrowed": "0"},
                    ],
                }
            ]
        },
    }
    return body


def cpu_left(q: QueueQuota) -> float:
    return q.groups[0].flavors[0].left["cpu"]


def rooms(*objs: dict[str, Any]) -> dict[str, float]:
    return {q.name: cpu_left(q) for q in queue_quotas(cluster_queue_from(o) for o in objs)}


def test_a_queue_alone_admits_its_nominal_quota_less_its_reservation() -> None:
    q = cluster_queue_from(cluster_queue("team", "5", "2500m"))
    assert q.cohort is None and q.groups[0][0] == frozenset({"cpu", "memory"})
    (quota,) = queue_quotas([q])
    assert quota.groups[0].flavors[0].left == {"cpu": 2.5, "memory": 64 * GI}
    # a borrowing limit means nothing outside a cohort
    assert rooms(cluster_queue("team", "5", "2", borrowing="10")) == {"team": 3.0}


def test_a_cohort_lends_what_its_members_do_not_use_up_to_the_borrowing_limit() -> None:
    a = cluster_queue("a", "4", "1", cohort="pool")
    b = cluster_queue("b", "4", "0", cohort="pool", borrowing="2")
    # 3 left of a's own + 4 of b's; b may use 4 + 2 at most
    assert rooms(a, b) == {"a": 7.0, "b": 6.0}
    # b lends at most 1: a keeps 3 of its own and borrows 1; b keeps its 3 that it does not lend
    lends_one = cluster_queue("b", "4", "0", cohort="pool", lending="1")
    assert rooms(a, lends_one) == {"a": 4.0, "b": 7.0}
    # a borrows already (uses 6 of its 4): 2 of b's lent 4 are left for either
    borrowing = cluster_queue("a", "4", "6", cohort="pool")
    assert rooms(borrowing, cluster_queue("b", "4", "0", cohort="pool")) == {"a": 2.0, "b": 2.0}
    # another cohort lends nothing to this one
    assert rooms(a, cluster_queue("c", "4", "0", cohort="other")) == {"a": 3.0, "c": 4.0}


def test_a_stopped_or_inactive_queue_admits_nothing() -> None:
    w = Resources(cpu=1)
    for obj in (
        cluster_queue("held", "8", stopPolicy="Hold"),
        {
            **cluster_queue("broken", "8"),
            "status": {"conditions": [{"type": "Active", "status": "False"}]},
        },
    ):
        (quota,) = queue_quotas([cluster_queue_from(obj)])
        assert not quota.admits(w)
    (quota,) = queue_quotas([cluster_queue_from(cluster_queue("open", "8"))])
    assert quota.admits(w)


def test_local_queues_name_their_cluster_queue() -> None:
    lq = {"metadata": {"namespace": "ns", "name": "user"}, "spec": {"clusterQueue": "team"}}
    record = local_queue_from(lq)
    assert record is not None
    assert cluster_queues_of([record]) == {("ns", "user"): "team"}
    assert local_queue_from({"metadata": {"name": "x"}, "spec": {}}) is None


def trainer(queue: str | None, replicas: int) -> dict[str, Any]:
    labels = {"edl.paddlepaddle.org/job": "j"}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    return {
        "metadata": {"namespace": "ns", "name": "j", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "j"}},
            "template": {
                "spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]},
            },
        },
    }


KUEUE_POD = {"kueue.x-k8s.io/queue-name": "user", "kueue.x-k8s.io/managed": "true"}
"""The labels Kueue's webhooks leave on a pod of a Deployment queued in LocalQueue `user`."""


def worker(i: int, gated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    else:
        spec["nodeName"] = "node-1"
    return {
        "metadata": {"namespace": "ns", "name": f"j-{i}", "labels": {"app": "j", **KUEUE_POD}},
        "spec": spec,
        "status": {"phase": "Pending" if gated else "Running"},
    }


def test_a_queued_job_gets_its_cluster_queue_and_counts_its_admitted_workers() -> None:
    deployment = deployment_from(trainer("user", 4))
    assert deployment is not None and deployment.queue == "user"
    pods = [p for p in (pod_from(worker(i, gated=i >= 2)) for i in range(4)) if p is not None]
    assert [p.queued for p in pods] == [False, False, True, True]
    node = Node("node-1", Resources(cpu=8, memory=64 * GI))
    # the queue's status counts the 2 admitted workers (2 CPUs reserved), or not yet (0): the
    # room is the same, 1 more worker; of the 2 gated ones, 1 is planned
    for reserved in ("2", "0"):
        queue = cluster_queue_from(cluster_queue("team", "3", reserved))
        snapshot = assemble([], pods, [deployment], [], queues=[queue],
                            local_queues={("ns", "user"): "team"})  # fmt: skip
        (job,) = snapshot.jobs
        assert (job.queue, job.admitted) == ("team", 2)
        (quota,) = snapshot.queues
        assert cpu_left(quota) == 1.0
        plan = decide([node], snapshot.pods, [job], now=100.0, queues=snapshot.queues)
        d = plan.jobs["ns/j"]
        assert (d.desired, d.limited_by.value) == (3, "queue_quota")
        assert "ClusterQueue team admits no more workers" in d.message


def test_without_kueue_or_its_local_queue_the_label_is_handled_as_kueue_would() -> None:
    deployment = deployment_from(trainer("user", 1))
    assert deployment is not None
    # Kueue's queues not read (no --sizing-kueue): the job is not queued
    (job,) = assemble([], [], [deployment], []).jobs
    assert job.queue is None
    # read, but the LocalQueue does not exist: Kueue admits nothing, and the message says why
    (job,) = assemble([], [], [deployment], [], queues=(), local_queues={}).jobs
    assert job.queue == "of LocalQueue ns/user (none such)"
    # a Deployment without the label is never queued
    plain = deployment_from(trainer(None, 1))
    assert plain is not None
    (job,) = assemble([], [], [plain], [], queues=(), local_queues={}).jobs
    assert job.queue is None


def test_admitted_workers_the_status_misses_fill_the_flavors_in_order() -> None:
    obj = cluster_queue("team", "2", "0")
    flavors = obj["spec"]["resourceGroups"][0]["flavors"]
    spot = [{"name": "cpu", "nominalQuota": "4"}, {"name": "memory", "nominalQuota": "64Gi"}]
    flavors.append({"name": "spot", "resources": spot})
    record = cluster_queue_from(obj)
    usage = QueueUsage({})
    usage.admitted = {"team": {"cpu": 3.0}}
    (quota,) = queue_quotas([record], usage)
    assert [f.left["cpu"] for f in quota.groups[0].flavors] == [0.0, 3.0]
    # a status that counts more than the pods show is kept as it is
    usage.admitted = {"team": {"cpu": 1.0}}
    (quota,) = queue_quotas([cluster_queue_from(cluster_queue("team", "4", "3"))], usage)
    assert cpu_left(quota) == 1.0


def test_a_pod_of_another_workload_waiting_in_a_queue_is_demand_on_that_queue() -> None:
    deployment = deployment_from(trainer("user", 3))
    assert deployment is not None
    workers = [pod_from(worker(i, gated=False)) for i in range(3)]
    other = worker(9, gated=True)
    other["metadata"] |= {"name": "urgent", "labels": dict(KUEUE_POD)}
    other["spec"]["priority"] = 1000
    unqueued = worker(8, gated=True)
    unqueued["metadata"] |= {"name": "elsewhere", "labels": {}}
    pods = [p for p in (*workers, pod_from(other), pod_from(unqueued)) if p is not None]
    queue = cluster_queue_from(cluster_queue("team", "3", "3"))
    snapshot = assemble([], pods, [deployment], [], queues=[queue],
                        local_queues={("ns", "user"): "team"})  # fmt: skip
    by_name = {p.name: p for p in snapshot.pods}
    assert (by_name["urgent"].queue, by_name["elsewhere"].queue) == ("team", None)
    plan = decide([Node("node-1", Resources(cpu=8, memory=64 * GI))], snapshot.pods,
                  list(snapshot.jobs), now=100.0, queues=snapshot.queues)  # fmt: skip
    d = plan.jobs["ns/j"]
    assert (d.desired, d.limited_by.value) == (2, "protected_demand")
    assert "ns/urgent (priority 1000)" in d.message


def test_a_worker_going_gives_its_quota_back_though_its_workload_is_not_finished() -> None:
    deployment = deployment_from(trainer("user", 2))
    assert deployment is not None
    going = worker(2, gated=False)
    going["metadata"] |= {"deletionTimestamp": "2026-05-01T12:00:00Z",
                          "finalizers": ["kueue.x-k8s.io/managed"]}  # fmt: skip
    record = pod_from(going)
    assert record is not None and record.releasing
    unmanaged = worker(3, gated=False)
    unmanaged["metadata"]["deletionTimestamp"] = "2026-05-01T12:00:00Z"
    assert pod_from(unmanaged) is None  # no finalizer of Kueue's: gone as before
    # the 3 workers' Workloads hold 3 CPUs: j-2's pod is being deleted, j-3's is gone already
    reserved = ("QuotaReserved", "True")
    held = []
    for name in ("j-0", "j-1", "j-2", "j-3"):
        obj = workload("team", "1", reserved)
        obj["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": name}]
        held.append(workload_from(obj))
    pods = [p for p in (pod_from(worker(0, False)), pod_from(worker(1, False)), record) if p]
    live = {f"{p.pod.namespace}/{p.pod.name}" for p in pods if not p.releasing}
    queue = cluster_queue_from(cluster_queue("team", "3", "3"))
    (counted,) = with_workloads([queue], [w for w in held if w], live)
    assert counted.used["default"]["cpu"] == 2.0
    snapshot = assemble([], pods, [deployment], [], queues=[counted],
                        local_queues={("ns", "user"): "team"})  # fmt: skip
    (job,) = snapshot.jobs
    assert job.admitted == 2 and [p.name for p in snapshot.pods] == ["j-0", "j-1"]
    (quota,) = snapshot.queues
    assert cpu_left(quota) == 1.0


def workload(cq: str, cpu: str, *conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "pod-x-1234"},
        "status": {
            "conditions": [{"type": t, "status": s} for t, s in conditions],
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"cpu": "default", "memory": "default"},
                        "resourceUsage": {"cpu": cpu, "memory": "1Gi"},
                        "count": 1,
                    }
                ],
            },
        },
    }


def test_a_queues_usage_is_what_its_workloads_holding_quota_take() -> None:
    reserved = ("QuotaReserved", "True")
    held = [workload_from(workload("team", "2", reserved)),
            workload_from(workload("team", "500m", reserved, ("Admitted", "True")))]  # fmt: skip
    assert all(held)
    # finished, evicted (no reservation) or pending: they hold nothing
    assert workload_from(workload("team", "1", reserved, ("Finished", "True"))) is None
    assert workload_from(workload("team", "1", ("QuotaReserved", "False"))) is None
    assert workload_from({"status": {}}) is None
    # the status (3 reserved) is not read: the Workloads say 2.5
    (queue,) = with_workloads([cluster_queue_from(cluster_queue("team", "4", "3"))],
                              [w for w in held if w])  # fmt: skip
    assert queue.used == {"default": {"cpu": 2.5, "memory": 2 * GI}}
    (quota,) = queue_quotas([queue])
    assert cpu_left(quota) == 1.5


def waiting_workload(owner_kind: str, requests: dict[str, str] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "QuotaReserved", "status": "False"}]}
    if requests is not None:
        status["resourceRequests"] = [{"name": "main", "resources": requests}]
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"{owner_kind.lower()}-batch-1",
            "ownerReferences": [{"kind": owner_kind, "name": "batch"}],
        },
        "spec": {"queueName": "user", "priority": 1000, "podSets": [{"name": "main", "count": 2}]},
        "status": status,
    }


def test_a_waiting_workload_without_pods_is_demand_on_its_queue() -> None:
    job_workload = workload_from(waiting_workload("Job", {"cpu": "2", "memory": "2Gi"}))
    assert isinstance(job_workload, WaitingWorkload)
    assert (job_workload.requests, job_workload.pods) == (Resources(cpu=2, memory=2 * GI), 2)
    pod_workload = workload_from(waiting_workload("Pod", {"cpu": "1"}))
    assert isinstance(pod_workload, WaitingWorkload) and pod_workload.of_pod
    # not considered by Kueue yet: nothing known of what it asks
    assert workload_from(waiting_workload("Job", None)) is None
    deployment = deployment_from(trainer("user", 4))
    assert deployment is not None
    pods = [p for p in (pod_from(worker(i, gated=False)) for i in range(4)) if p is not None]
    queue = cluster_queue_from(cluster_queue("team", "4", "4"))
    snapshot = assemble([], pods, [deployment], [], queues=[queue],
                        local_queues={("ns", "user"): "team"},
                        waiting=[job_workload, pod_workload])  # fmt: skip
    # the pod's Workload is left out: its gated pod is the demand (none here)
    assert [(d.key, d.queue, d.pods) for d in snapshot.waiting] == [("ns/job-batch-1", "team", 2)]
    plan = decide([Node("node-1", Resources(cpu=8, memory=64 * GI))], snapshot.pods,
                  list(snapshot.jobs), now=100.0, queues=snapshot.queues,
                  waiting=snapshot.waiting)  # fmt: skip
    d = plan.jobs["ns/j"]
    assert (d.desired, d.limited_by.value) == (2, "protected_demand")
    assert "made room for ns/job-batch-1 (priority 1000)" in d.message


def pod_workload(pod: str, holding: bool) -> dict[str, Any]:
    """The Workload of Kueue's pod integration for ``pod``: holding 1 CPU, or waiting for it."""
    obj = workload("team", "1", ("QuotaReserved", "True")) if holding else (
        waiting_workload("Pod", {"cpu": "1", "memory": "1Gi"}))  # fmt: skip
    obj["metadata"] |= {"name": f"pod-{pod}", "ownerReferences": [{"kind": "Pod", "name": pod}]}
    return obj


def test_a_pod_and_its_workload_count_once_whichever_watch_tells_its_admission_first() -> None:
    # Kueue reserves the quota in the pod's Workload, then lifts the pod's gate (14 ms later
    # in the e2e's Kueue log): the two watches may tell it in either order. Counted both as
    # in use and as waiting, the job would give up two workers for the one pod (3, not 4).
    deployment = deployment_from(trainer("user", 4))
    assert deployment is not None
    workers = [pod_from(worker(i, gated=False)) for i in range(4)]
    node = Node("node-1", Resources(cpu=8, memory=64 * GI))
    queue = cluster_queue_from(cluster_queue("team", "5", "5"))
    for gated, holding in ((True, False), (True, True), (False, True), (False, False)):
        urgent = worker(9, gated=gated)
        urgent["metadata"] |= {"name": "urgent", "labels": dict(KUEUE_POD)}
        urgent["spec"]["priority"] = 1000
        objs = [pod_workload(f"j-{i}", True) for i in range(4)]
        workloads = [w for w in map(workload_from, [*objs, pod_workload("urgent", holding)]) if w]
        pods = [p for p in (*workers, pod_from(urgent)) if p is not None]
        snapshot = assemble(
            [], pods, [deployment], [],
            queues=with_workloads([queue], workloads),
            local_queues={("ns", "user"): "team"},
            waiting=[w for w in workloads if isinstance(w, WaitingWorkload)],
            holding=holding_pods(workloads),
        )  # fmt: skip
        (quota,) = snapshot.queues
        plan = decide([node], snapshot.pods, list(snapshot.jobs), now=100.0,
                      queues=snapshot.queues, waiting=snapshot.waiting)  # fmt: skip
        d = plan.jobs["ns/j"]
        seen = f"pod {'gated' if gated else 'admitted'}, " + (
            "Workload holding" if holding else "Workload waiting")  # fmt: skip
        assert (cpu_left(quota), d.desired) == (0.0 if holding or not gated else 1.0, 4), seen
