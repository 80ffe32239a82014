"""Kueue ClusterQueues in the decision: no worker is planned that its queue would leave waiting."""

from __future__ import annotations

from typing import Any

import pytest

from edl_sizing import (
    FlavorRoom,
    Job,
    Node,
    Pod,
    QueueDemand,
    QueueGroup,
    QueueQuota,
    Resources,
    decide,
)

pytestmark = pytest.mark.unit

GI = 2**30
CPU1 = Resources(cpu=1, memory=GI)
LINEAR = {n: 100.0 * n for n in range(1, 9)}
"""A job that scales perfectly, so only capacity and queues limit it."""
CPU_MEMORY = frozenset({"cpu", "memory"})
HUGE = [Node("node-1", Resources(cpu=16, memory=64 * GI))]
ROOMY = [Node("node-1", Resources(cpu=8, memory=64 * GI))]


def job(name: str, **kw: Any) -> Job:
    base: dict[str, Any] = {
        "worker": CPU1,
        "replicas": 2,
        "admitted": 2,
        "max_replicas": 16,
        "observed": LINEAR,
        "queue": "team",
    }
    base.update(kw)
    return Job("ns", name, **base)


def bound(j: Job, count: int) -> list[Pod]:
    return [Pod("ns", f"{j.name}-{i}", j.worker, 0, "node-1", j.key) for i in range(count)]


def queue(cpu: float, memory: float = 64 * GI, name: str = "team") -> QueueQuota:
    room = FlavorRoom("default", {"cpu": cpu, "memory": memory})
    return QueueQuota(name, (QueueGroup(frozenset({"cpu", "memory"}), (room,)),))


def test_growth_stops_where_the_cluster_queue_admits_no_more_and_says_so() -> None:
    a = job("a")
    # the queue's usage counts the 2 admitted workers: 3 CPUs left admit 3 more
    plan = decide(ROOMY, bound(a, 2), [a], now=100.0, queues=[queue(cpu=3.5)])
    d = plan.jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (5, "queue_quota")
    assert d.message.startswith("grew to 5 (+3): ")
    none_left = decide(ROOMY, bound(a, 2), [a], now=100.0, queues=[queue(cpu=0.5)])
    d = none_left.jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (2, "queue_quota")
    assert d.message == (
        "stays at 2: the Kueue ClusterQueue team admits no more workers (1 CPU, 1 GiB each)"
    )


def test_a_job_in_no_queue_and_another_queue_are_not_limited() -> None:
    free = job("a", queue=None)
    assert (
        decide(ROOMY, bound(free, 2), [free], now=100.0, queues=[queue(cpu=0)]).jobs["ns/a"].desired
        == 8
    )
    elsewhere = job("a")
    plan = decide(ROOMY, bound(elsewhere, 2), [elsewhere], now=100.0,
                  queues=[queue(cpu=0, name="other"), queue(cpu=6)])  # fmt: skip
    assert plan.jobs["ns/a"].desired == 8


def test_a_queue_that_does_not_exist_admits_nothing_beyond_the_admitted() -> None:
    a = job("a", queue="missing")
    d = decide(ROOMY, bound(a, 2), [a], now=100.0, queues=[queue(cpu=6)]).jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (2, "queue_quota")
    assert "ClusterQueue missing" in d.message


def test_created_workers_the_queue_leaves_waiting_are_not_kept() -> None:
    # 5 replicas, 3 admitted and running, 2 gated by Kueue; the queue has no room left
    a = job("a", replicas=5, admitted=3)
    d = decide(ROOMY, bound(a, 3), [a], now=100.0, queues=[queue(cpu=0)]).jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (3, "queue_quota")
    # with room for one of them, that one is kept (and growth stops there)
    d = decide(ROOMY, bound(a, 3), [a], now=100.0, queues=[queue(cpu=1)]).jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (4, "queue_quota")


def test_jobs_of_one_queue_share_its_room() -> None:
    a, b = job("a"), job("b")
    plan = decide(ROOMY, bound(a, 2) + bound(b, 2), [a, b], now=100.0, queues=[queue(cpu=3)])
    d = {k: v.desired for k, v in plan.jobs.items()}
    assert sum(d.values()) == 4 + 3
    assert {v.limited_by.value for v in plan.jobs.values()} == {"queue_quota"}


def test_flavors_are_tried_in_order_and_each_group_must_admit() -> None:
    w = Resources(cpu=1, memory=GI, gpu=1)
    two_flavors = QueueQuota(
        "gpus",
        (
            QueueGroup(CPU_MEMORY, (FlavorRoom("cpu", {"cpu": 10, "memory": 100 * GI}),)),
            QueueGroup(
                frozenset({"gpu"}),
                (FlavorRoom("a100", {"gpu": 1}), FlavorRoom("h100", {"gpu": 2})),
            ),
        ),
    )  # fmt: skip
    assert two_flavors.choose(w) == (0, 0)
    after = two_flavors.moved(w, (0, 0), 1.0)
    assert after.choose(w) == (0, 1)
    after = after.moved(w, (0, 1), 1.0).moved(w, (0, 1), 1.0)
    assert after.choose(w) is None
    assert after.moved(w, (0, 1), -1.0).choose(w) == (0, 1)
    # a resource no group covers makes the pod inadmissible, whatever the room
    assert not queue(cpu=10).admits(w)
    # a resource the pod does not request needs no room
    assert queue(cpu=10, memory=0).admits(Resources(cpu=1))


def test_growth_given_back_returns_its_queue_room() -> None:
    # "slow" cannot pay back its rescale pause: its growth is undone, and the queue room it
    # took goes to the other job of the queue
    slow = job("slow", rescale_pause_s=1000.0)
    other = job("other", arrival=5.0)
    plan = decide(ROOMY, bound(slow, 2) + bound(other, 2), [slow, other], now=100.0,
                  queues=[queue(cpu=3)])  # fmt: skip
    d = {k.split("/")[1]: v.desired for k, v in plan.jobs.items()}
    assert d == {"slow": 2, "other": 5}


def waiting_pod(priority: int, cpu: float = 1, queue_name: str = "team") -> Pod:
    """A pod of another workload held by Kueue's admission gate in ``queue_name``."""
    return Pod(
        "ns", "urgent", Resources(cpu=cpu, memory=GI), priority, None, None, queue=queue_name
    )


def test_a_pod_waiting_in_the_queue_with_a_higher_priority_shrinks_the_job_for_it() -> None:
    a = job("a", replicas=5, admitted=5)
    d = decide(ROOMY, [*bound(a, 5), waiting_pod(1000)], [a], now=100.0,
               queues=[queue(cpu=0)]).jobs["ns/a"]  # fmt: skip
    assert (d.desired, d.limited_by.value) == (4, "protected_demand")
    assert (
        d.message == "shrank to 4: made room for ns/urgent (priority 1000); the job's priority is 0"
    )
    # two CPUs for it: two workers
    d = decide(ROOMY, [*bound(a, 5), waiting_pod(1000, cpu=2)], [a], now=100.0,
               queues=[queue(cpu=0)]).jobs["ns/a"]  # fmt: skip
    assert d.desired == 3


def test_a_waiting_pod_the_job_should_not_or_cannot_make_room_for_shrinks_nothing() -> None:
    a = job("a", replicas=5, admitted=5)
    # (a node with room for all: only the queue is short)
    for pod in (
        waiting_pod(0),  # no higher priority than the job's
        waiting_pod(1000, queue_name="other"),  # another queue
        waiting_pod(1000, cpu=5),  # more than the job's 4 workers above its minimum
    ):
        plan = decide(HUGE, [*bound(a, 5), pod], [a], now=100.0,
                      queues=[queue(cpu=0), queue(cpu=0, name="other")])  # fmt: skip
        assert plan.jobs["ns/a"].desired == 5, pod


def test_room_a_waiting_pod_needs_is_not_grown_into() -> None:
    a = job("a")
    d = decide(ROOMY, [*bound(a, 2), waiting_pod(1000)], [a], now=100.0,
               queues=[queue(cpu=3)]).jobs["ns/a"]  # fmt: skip
    assert (d.desired, d.limited_by.value) == (4, "queue_quota")
    # a pod of lower priority than the job's: Kueue admits the job's new workers first
    d = decide(ROOMY, [*bound(a, 2), waiting_pod(-1)], [a], now=100.0,
               queues=[queue(cpu=3)]).jobs["ns/a"]  # fmt: skip
    assert d.desired == 5


def test_a_waiting_workload_without_pods_is_admitted_whole_or_takes_nothing() -> None:
    a = job("a", replicas=5, admitted=5)
    batch = QueueDemand("ns/batch", "team", 1000, Resources(cpu=2, memory=2 * GI), pods=2)
    d = decide(HUGE, bound(a, 5), [a], now=100.0, queues=[queue(cpu=0)],
               waiting=[batch]).jobs["ns/a"]  # fmt: skip
    assert (d.desired, d.limited_by.value) == (3, "protected_demand")
    assert "made room for ns/batch (priority 1000)" in d.message
    # 6 CPUs: more than the 4 workers above the job's minimum; nothing is given for part of it
    too_big = QueueDemand("ns/batch", "team", 1000, Resources(cpu=6, memory=2 * GI), pods=6)
    d = decide(HUGE, bound(a, 5), [a], now=100.0, queues=[queue(cpu=0)],
               waiting=[too_big]).jobs["ns/a"]  # fmt: skip
    assert d.desired == 5


def test_a_minimum_worker_the_queue_has_not_admitted_takes_its_room_before_growth() -> None:
    # the e2e's step 2: the job's one worker waits gated (min 1, nothing admitted) and the
    # queue's quota becomes 3 CPUs; the minimum is served whatever the queue says, but it
    # waits for the same room: 2 more, never 3 (Kueue would admit 3 and leave one gated,
    # and the job would shrink back to 3 a round later)
    a = job("a", replicas=1, admitted=0, min_replicas=1)
    plan = decide(ROOMY, [], [a], now=100.0, queues=[queue(cpu=3)])
    d = plan.jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (3, "queue_quota")
    # no room at all: it is held at its minimum
    d = decide(ROOMY, [], [a], now=100.0, queues=[queue(cpu=0)]).jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (1, "queue_quota")
