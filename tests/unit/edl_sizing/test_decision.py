"""The decision: mins first, fairness, protected demand, hold-off, pay-back, fallback."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from edl_sizing import (
    Job,
    Node,
    Plan,
    Pod,
    Quota,
    Resources,
    ScalingCurve,
    ScalingPrior,
    SizingPolicy,
    decide,
)

GI = 2**30
CPU1 = Resources(cpu=1, memory=GI)
LINEAR = {n: 100.0 * n for n in range(1, 9)}
"""Measured throughput of a job that scales perfectly (so only capacity limits it)."""


def nodes(count: int, cpu: float = 4, prefix: str = "node") -> list[Node]:
    return [Node(f"{prefix}-{i + 1}", Resources(cpu=cpu, memory=64 * GI)) for i in range(count)]


def job(name: str, **kw: Any) -> Job:
    base: dict[str, Any] = {
        "worker": CPU1,
        "replicas": 1,
        "min_replicas": 1,
        "max_replicas": 16,
        "observed": LINEAR,
    }
    base.update(kw)
    return Job("ns", name, **base)


def workers(j: Job, node_names: list[str]) -> list[Pod]:
    return [
        Pod("ns", f"{j.name}-{i}", j.worker, j.priority, n, j.key) for i, n in enumerate(node_names)
    ]


def desired(plan: Plan) -> dict[str, int]:
    return {k.split("/", 1)[1]: d.desired for k, d in plan.jobs.items()}


def reasons(plan: Plan) -> dict[str, str]:
    return {k.split("/", 1)[1]: d.limited_by.value for k, d in plan.jobs.items()}


def test_one_job_grows_into_free_room_and_says_where() -> None:
    a = job("a", replicas=2)
    plan = decide(nodes(1, cpu=6), workers(a, ["node-1"] * 2), [a], now=100.0)
    d = plan.jobs["ns/a"]
    assert (d.current, d.desired, d.limited_by.value) == (2, 6, "no_capacity")
    assert d.message.startswith("grew to 6 (+4): 4 CPUs free on node-1, marginal speed-up 1.00")
    assert plan.free == Resources(cpu=4, memory=62 * GI)


def test_growth_stops_at_max_and_at_low_marginal_gain() -> None:
    capped = job("capped", max_replicas=3)
    flat = job(
        "flat", observed={1: 100.0, 2: 120.0, 3: 125.0}, replicas=3, min_marginal_speedup=0.1
    )
    plan = decide(nodes(4), [], [capped, flat], now=100.0)
    assert desired(plan) == {"capped": 3, "flat": 3}
    assert reasons(plan) == {"capped": "at_max", "flat": "low_marginal_gain"}
    assert "threshold 0.10" in plan.jobs["ns/flat"].message


def test_exploration_is_capped_at_twice_the_largest_size_measured() -> None:
    fresh = job("fresh", observed={})
    assert desired(decide(nodes(4), [], [fresh])) == {"fresh": 2}
    measured = job("measured", observed={1: 100.0, 3: 290.0}, replicas=3)
    plan = decide(nodes(4), [], [measured])
    assert desired(plan) == {"measured": 6}
    assert reasons(plan) == {"measured": "hold_off"}


def _usl(n: int, sigma: float = 0.01, kappa: float = 0.0001) -> float:
    return 100.0 * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


def test_the_default_prior_assumes_no_retrogression_until_measured() -> None:
    # A job of 5-CPU workers that scales well, measured at 15 and 18 workers only (EDL 2018
    # case 2): two nearby sizes cannot tell contention from coherency, the prior decides.
    measured = job("a", worker=Resources(cpu=5, memory=8 * GI), replicas=18, max_replicas=60,
                   observed={15: _usl(15), 18: _usl(18)})  # fmt: skip
    cluster = nodes(30, cpu=16)  # room for 90 workers
    plan = decide(cluster, [], [measured], now=100.0)
    # Optimistic: it grows to its exploration cap (2 x 18) and gets measured there.
    assert desired(plan) == {"a": 36} and reasons(plan) == {"a": "hold_off"}
    # A prior with a coherency cost (the old default, kappa 0.002) puts the peak near 22
    # workers, and nothing measured ever contradicts it.
    pessimistic = SizingPolicy(prior=ScalingPrior(kappa=0.002))
    held = decide(cluster, [], [measured], pessimistic, now=100.0)
    assert desired(held)["a"] < 25 and reasons(held) == {"a": "low_marginal_gain"}
    # Measured sizes that show the curve flattening still stop it.
    falling = job("b", worker=measured.worker, replicas=18, max_replicas=60,
                  observed={n: _usl(n, 0.05, 0.004) for n in (8, 12, 18)})  # fmt: skip
    plan = decide(cluster, [], [falling], now=100.0)
    assert desired(plan) == {"b": 18} and reasons(plan) == {"b": "low_marginal_gain"}


def test_mins_first_running_jobs_then_waiting_jobs_by_priority_and_arrival() -> None:
    # 4 CPUs; a runs 3 (min 1); b (prio 5) and c (prio 5, later) each need a min of 2.
    a = job("a", replicas=3)
    b = job("b", replicas=2, min_replicas=2, priority=5, arrival=10.0)
    c = job("c", replicas=2, min_replicas=2, priority=5, arrival=20.0)
    plan = decide(nodes(1), workers(a, ["node-1"] * 3), [a, b, c], now=100.0)
    # b's minimum takes an extra of a; c's would need a below its own min: c waits, and
    # what it tried is rolled back (a keeps 2).
    assert desired(plan) == {"a": 2, "b": 2, "c": 2}
    assert reasons(plan) == {"a": "protected_demand", "b": "no_capacity", "c": "waiting"}
    assert "ns/b" in plan.jobs["ns/a"].message
    assert plan.jobs["ns/c"].message.startswith("waiting: its minimum of 2 workers")


def test_a_waiting_job_of_lower_priority_takes_no_one_s_room() -> None:
    a = job("a", replicas=4, priority=10)
    low = job("low", replicas=1, min_replicas=1, priority=0)
    plan = decide(nodes(1), workers(a, ["node-1"] * 4), [a, low], now=100.0)
    assert desired(plan) == {"a": 4, "low": 1}
    assert reasons(plan)["low"] == "waiting"


def test_fairness_weighted_marginal_speedup_per_dominant_share() -> None:
    # Same curves; b has weight 3: it gets workers first and ends with more.
    a = job("a", observed={1: 100.0, 2: 180.0, 4: 300.0, 8: 420.0}, replicas=1)
    b = job("b", observed={1: 100.0, 2: 180.0, 4: 300.0, 8: 420.0}, replicas=1, weight=3.0)
    plan = decide(nodes(1, cpu=10), [], [a, b], now=100.0)
    got = desired(plan)
    assert got["a"] + got["b"] == 10 and got["b"] > got["a"] >= 1
    # Equal weights split evenly.
    even = decide(nodes(1, cpu=10), [], [a, job("b", observed=a.observed, replicas=1)])
    assert desired(even) == {"a": 5, "b": 5}


def test_scarce_room_goes_to_fewer_jobs_in_larger_steps() -> None:
    # Two equal jobs at 4 workers, room for 2 more: one rescale of +2, not two of +1, as
    # long as the second worker is worth at least 1/margin of the other job's first.
    a = job("a", replicas=4, observed={1: 100.0, 2: 180.0, 4: 300.0, 8: 420.0})
    b = job("b", replicas=4, observed=a.observed)
    pods = workers(a, ["node-1"] * 4) + workers(b, ["node-1"] * 4)
    plan = decide(nodes(1, cpu=10), pods, [a, b], now=100.0)
    assert desired(plan) == {"a": 6, "b": 4}
    assert plan.jobs["ns/a"].message.startswith("grew to 6 (+2)")
    assert reasons(plan) == {"a": "no_capacity", "b": "no_capacity"}
    even = decide(nodes(1, cpu=10), pods, [a, b], SizingPolicy(rescale_margin=1.0), now=100.0)
    assert desired(even) == {"a": 5, "b": 5}
    # A much better use elsewhere still wins: b's fifth worker is worth far more than a's
    # sixth (b scales linearly).
    linear = job("b", replicas=4, observed=LINEAR)
    pods = workers(a, ["node-1"] * 4) + workers(linear, ["node-1"] * 4)
    assert desired(decide(nodes(1, cpu=10), pods, [a, linear], now=100.0)) == {"a": 4, "b": 6}


def test_dominant_share_favours_the_cheaper_worker() -> None:
    small = job("small", worker=Resources(cpu=1, memory=GI))
    big = job("big", worker=Resources(cpu=1, memory=16 * GI))
    plan = decide([Node("n", Resources(cpu=8, memory=40 * GI))], [], [small, big], now=100.0)
    got = desired(plan)
    assert got["small"] > got["big"]


def test_protected_pending_pod_shrinks_the_lowest_marginal_value_first() -> None:
    # Two nodes of 4 CPUs full of a (scales well) and b (scales badly); a 2-CPU pod of
    # priority 100 arrives: b gives up 2 workers, a keeps all of its 4.
    a = job("a", replicas=4, observed=LINEAR)
    b = job("b", replicas=4, observed={1: 100.0, 2: 150.0, 4: 180.0})
    pods = workers(a, ["node-1"] * 4) + workers(b, ["node-2"] * 4)
    pods.append(Pod("web", "urgent", Resources(cpu=2, memory=GI), priority=100))
    plan = decide(nodes(2), pods, [a, b], now=100.0)
    assert desired(plan) == {"a": 4, "b": 2}
    assert reasons(plan) == {"a": "no_capacity", "b": "protected_demand"}
    assert plan.jobs["ns/b"].message == (
        "shrank to 2: made room for web/urgent (priority 100); the job's priority is 0"
    )
    assert [(d.pod, d.node) for d in plan.protected] == [("web/urgent", "node-2")]


def test_protected_demand_never_shrinks_below_min_nor_a_higher_priority_job() -> None:
    a = job("a", replicas=4, min_replicas=3, priority=0)
    b = job("b", replicas=4, min_replicas=1, priority=1000)
    pods = workers(a, ["node-1"] * 4) + workers(b, ["node-2"] * 4)
    pods.append(Pod("web", "big", Resources(cpu=3, memory=GI), priority=500))
    plan = decide(nodes(2), pods, [a, b], now=100.0)
    assert desired(plan) == {"a": 4, "b": 4}  # nothing to gain: the pod does not fit anyway
    assert [(d.pod, d.node) for d in plan.protected] == [("web/big", None)]


def test_pending_pods_below_every_job_priority_are_not_protected() -> None:
    a = job("a", replicas=2, priority=10)
    pods = [*workers(a, ["node-1"] * 2), Pod("batch", "low", Resources(cpu=2), priority=0)]
    plan = decide(nodes(1), pods, [a], now=100.0)
    assert desired(plan) == {"a": 4} and plan.protected == ()


def test_protected_demand_goes_first_by_priority_then_size() -> None:
    a = job("a", replicas=8)
    pods = workers(a, ["node-1"] * 4 + ["node-2"] * 4)
    pods += [
        Pod("web", "small", Resources(cpu=1), priority=100),
        Pod("web", "large", Resources(cpu=3), priority=100),
        Pod("web", "vip", Resources(cpu=1), priority=200),
    ]
    plan = decide(nodes(2), pods, [a], now=100.0)
    assert [d.pod for d in plan.protected] == ["web/vip", "web/large", "web/small"]
    assert all(d.node for d in plan.protected)
    assert desired(plan) == {"a": 3}


def test_a_pod_too_large_to_make_room_for_does_not_stop_a_smaller_one() -> None:
    # No node can be emptied enough for 4 CPUs (a keeps its minimum of 3, b its 1): both
    # 4-CPU pods wait; the 2-CPU pod after them still gets room from b.
    a = job("a", replicas=4, min_replicas=3)
    b = job("b", replicas=4, min_replicas=1, observed={1: 100.0, 2: 150.0, 4: 180.0})
    pods = workers(a, ["node-1"] * 4) + workers(b, ["node-2"] * 4)
    pods += [
        Pod("web", "big", Resources(cpu=4, memory=GI), priority=100),
        Pod("web", "big-too", Resources(cpu=4, memory=GI), priority=90),
        Pod("web", "small", Resources(cpu=2, memory=GI), priority=80),
    ]
    plan = decide(nodes(2), pods, [a, b], now=100.0)
    assert [(d.pod, d.node) for d in plan.protected] == [
        ("web/big", None), ("web/big-too", None), ("web/small", "node-2"),
    ]  # fmt: skip
    assert desired(plan) == {"a": 4, "b": 2}


def test_terminating_room_is_not_counted_twice_after_the_shrink() -> None:
    # After the shrink, the capacity source no longer lists the deleted worker: the pending
    # pod fits, the job is not shrunk again.
    a = job("a", replicas=3)
    pods = [*workers(a, ["node-1"] * 3), Pod("web", "urgent", Resources(cpu=2), priority=100)]
    first = decide(nodes(1), pods, [a], now=100.0)
    assert desired(first) == {"a": 2}
    after = [*workers(job("a", replicas=2), ["node-1"] * 2), pods[-1]]
    second = decide(nodes(1), after, [job("a", replicas=2)], now=101.0)
    assert desired(second) == {"a": 2}
    assert reasons(second) == {"a": "no_capacity"}


def test_hold_off_after_growth_but_shrink_is_at_once() -> None:
    policy = SizingPolicy(hold_off_s=60.0)
    a = job("a", replicas=2, last_rescale=1000.0)
    pods = workers(a, ["node-1"] * 2)
    held = decide(nodes(1), pods, [a], policy, now=1030.0)
    assert desired(held) == {"a": 2} and reasons(held) == {"a": "hold_off"}
    assert "held off" in held.jobs["ns/a"].message
    assert desired(decide(nodes(1), pods, [a], policy, now=1060.0)) == {"a": 4}
    urgent = Pod("web", "urgent", Resources(cpu=3), priority=100)
    shrunk = decide(nodes(1), [*pods, urgent], [a], policy, now=1001.0)
    assert desired(shrunk) == {"a": 1}


def test_growth_must_pay_back_the_rescale_pause() -> None:
    observed = {1: 100.0, 2: 180.0}  # worker 3 adds ~0.7 of a worker: pays back a short pause only
    slow = job("a", replicas=2, observed=observed, rescale_pause_s=60.0, min_marginal_speedup=0.0)
    policy = SizingPolicy(payback_s=120.0)
    plan = decide(nodes(1, cpu=3), [], [slow], policy, now=100.0)
    assert desired(plan) == {"a": 2} and reasons(plan) == {"a": "low_marginal_gain"}
    quick = job("a", replicas=2, observed=observed, rescale_pause_s=1.0, min_marginal_speedup=0.0)
    assert desired(decide(nodes(1, cpu=3), [], [quick], policy, now=100.0)) == {"a": 3}


def test_room_given_back_by_an_unpaid_growth_goes_to_others() -> None:
    slow = job("slow", replicas=1, observed={1: 100.0, 2: 120.0}, rescale_pause_s=100.0,
               min_marginal_speedup=0.0, weight=10.0)  # fmt: skip
    other = job("other", replicas=1)
    plan = decide(nodes(1, cpu=4), [], [slow, other], SizingPolicy(payback_s=150.0), now=100.0)
    assert desired(plan) == {"slow": 1, "other": 3}


FLAT = {1: 100.0, 2: 150.0, 4: 200.0, 8: 230.0}
"""A job that scales badly: its eighth worker adds about 0.05 of one worker."""


def test_growth_takes_a_worker_worth_less_than_half_as_much_elsewhere() -> None:
    # One node of 8 CPUs, full: flat runs 7 (its 7th worker adds 0.05), linear runs 1.
    flat = job("flat", replicas=7, observed=FLAT)
    linear = job("linear", replicas=1, observed={1: 100.0})
    pods = workers(flat, ["node-1"] * 7) + workers(linear, ["node-1"])
    plan = decide(nodes(1, cpu=8), pods, [flat, linear], now=100.0)
    assert desired(plan) == {"flat": 6, "linear": 2}  # linear: capped at 2 x measured
    assert reasons(plan) == {"flat": "low_marginal_gain", "linear": "hold_off"}
    assert plan.jobs["ns/linear"].message == (
        "grew to 2: the room of 1 worker of ns/flat (marginal speed-up 0.05 there), "
        "marginal speed-up 0.90"
    )
    assert plan.jobs["ns/flat"].message == (
        "shrank to 6: its workers are worth more to ns/linear "
        "(marginal speed-up 0.90 there, 0.05 here)"
    )
    # Worth more, but not twice as much (the rescale margin): nothing moves. Linear's 4th
    # worker speeds it up by a third; close's 5th adds a sixth to close's speed.
    close = job("close", replicas=5, observed={1: 100.0, 2: 195.0, 4: 370.0, 8: 650.0})
    three = job("linear", replicas=3, observed={1: 100.0, 2: 200.0, 3: 300.0})
    pods = workers(close, ["node-1"] * 5) + workers(three, ["node-1"] * 3)
    assert desired(decide(nodes(1, cpu=8), pods, [close, three], now=100.0)) == {
        "close": 5, "linear": 3,
    }  # fmt: skip
    # Without the margin the worker moves: it speeds linear up by more than close loses.
    policy = SizingPolicy(rescale_margin=1.0)
    assert desired(decide(nodes(1, cpu=8), pods, [close, three], policy, now=100.0)) == {
        "close": 4, "linear": 4,
    }  # fmt: skip


CASE1 = {1: 104.0, 2: 200.0, 4: 398.0, 8: 759.0, 16: 1346.0, 32: 2184.0, 60: 3046.0}
"""Case 1's class curve as measured (a straight line between the sizes, 0.7 of one worker per
worker from 8 to 16, 0.5 from 16 to 32)."""


def test_a_worker_goes_where_it_speeds_its_job_up_by_the_larger_share() -> None:
    # Two jobs of one class on a full node: big (first come) at 28, small (late) at 8. One
    # more worker adds 0.69 of one worker's speed to small (a tenth of its speed) and 0.5 to
    # big (a 38th): small takes big's workers until the next one is no longer worth twice
    # as much to it (the rescale margin), and the round after nothing moves back.
    big = job("big", replicas=28, max_replicas=60, observed=CASE1)
    small = job("small", replicas=8, max_replicas=60, observed=CASE1)
    pods = workers(big, ["node-1"] * 28) + workers(small, ["node-1"] * 8)
    no_reserve = SizingPolicy(arrival_reserve=0)  # the room kept for arrivals: its own test
    plan = decide(nodes(1, cpu=36), pods, [big, small], no_reserve, now=100.0)
    assert desired(plan) == {"big": 23, "small": 13}
    assert plan.jobs["ns/small"].message == (
        "grew to 13 (+5): the room of 5 workers of ns/big (marginal speed-up 0.50 there), "
        "marginal speed-up 0.69"
    )
    assert plan.jobs["ns/big"].limited_by.value == "low_marginal_gain"
    big, small = replace(big, replicas=23), replace(small, replicas=13, last_rescale=100.0)
    pods = workers(big, ["node-1"] * 23) + workers(small, ["node-1"] * 13)
    again = decide(nodes(1, cpu=36), pods, [big, small], no_reserve, now=200.0)
    assert desired(again) == {"big": 23, "small": 13}


def test_growth_never_takes_below_min_nor_from_higher_priority() -> None:
    at_min = job("at-min", replicas=7, min_replicas=7, observed=FLAT)
    high = job("high", replicas=7, priority=10, observed=FLAT)
    linear = job("linear", replicas=1, observed={1: 100.0})
    for donor in (at_min, high):
        pods = workers(donor, ["node-1"] * 7) + workers(linear, ["node-1"])
        plan = decide(nodes(1, cpu=8), pods, [donor, linear], now=100.0)
        assert desired(plan) == {donor.name: 7, "linear": 1}
        assert reasons(plan)["linear"] == "no_capacity"


def test_taken_room_is_kept_until_the_donor_has_scaled_down() -> None:
    # The round after: linear's HPA made it 2 (one worker Pending), flat's HPA has not scaled
    # it down yet (7 bound). The plan is the same, not a flip back.
    flat = job("flat", replicas=7, observed=FLAT)
    linear = job("linear", replicas=2, observed={1: 100.0}, last_rescale=105.0)
    pods = workers(flat, ["node-1"] * 7) + workers(linear, ["node-1"])[:1]
    plan = decide(nodes(1, cpu=8), pods, [flat, linear], now=110.0)
    assert desired(plan) == {"flat": 6, "linear": 2}
    # Once it has, and linear's worker is bound, nothing moves back.
    flat6 = job("flat", replicas=6, observed=FLAT)
    pods = workers(flat6, ["node-1"] * 6) + workers(linear, ["node-1"] * 2)
    again = decide(nodes(1, cpu=8), pods, [flat6, linear], now=120.0)
    assert desired(again) == {"flat": 6, "linear": 2}
    assert "threshold 0.05" in again.jobs["ns/flat"].message  # its 7th worker adds 0.04


def test_taken_workers_come_from_as_few_jobs_as_possible() -> None:
    # Two equally flat donors on one node; linear (measured at 2) grows by 2: both workers
    # come from one donor (one rescale), though the other's last worker is worth the same.
    flatter = {1: 100.0, 2: 110.0, 4: 118.0, 8: 122.0}
    a = job("a", replicas=4, observed=flatter)
    b = job("b", replicas=4, observed=flatter)
    linear = job("linear", replicas=2, observed={1: 100.0, 2: 200.0})
    pods = workers(a, ["node-1"] * 4) + workers(b, ["node-1"] * 4) + workers(linear, ["n-1"] * 2)
    cluster = [*nodes(1, cpu=8), *nodes(1, cpu=2, prefix="n")]
    plan = decide(cluster, pods, [a, b, linear], now=100.0)
    assert desired(plan)["linear"] == 4
    assert sorted([desired(plan)["a"], desired(plan)["b"]]) == [2, 4]
    assert plan.jobs["ns/linear"].message.startswith("grew to 4 (+2): the room of 2 workers of ns/")


def test_an_unpaid_growth_gives_the_taken_workers_back() -> None:
    flat = job("flat", replicas=7, observed=FLAT)
    slow = job("slow", replicas=1, observed={1: 100.0, 2: 130.0}, rescale_pause_s=200.0)
    pods = workers(flat, ["node-1"] * 7) + workers(slow, ["node-1"])
    plan = decide(nodes(1, cpu=8), pods, [flat, slow], SizingPolicy(payback_s=150.0), now=100.0)
    assert desired(plan) == {"flat": 7, "slow": 1}
    assert reasons(plan)["slow"] == "low_marginal_gain"
    assert plan.jobs["ns/flat"].message.startswith("stays at 7: one more worker would add")
    assert plan.jobs["ns/flat"].nodes == {"node-1": 7}


def test_granted_but_unbound_workers_keep_their_place() -> None:
    # The HPA applied 4, two pods are Pending (not yet scheduled): still 4, not a shrink.
    a = job("a", replicas=4, last_rescale=99.0)
    plan = decide(nodes(1), workers(a, ["node-1"] * 2), [a], now=100.0)
    assert desired(plan) == {"a": 4}
    # Room went elsewhere meanwhile: only what fits is kept.
    web = Pod("web", "w", Resources(cpu=1), node="node-1", priority=-5)
    plan = decide(nodes(1), [*workers(a, ["node-1"] * 2), web], [a], now=100.0)
    assert desired(plan) == {"a": 3} and reasons(plan) == {"a": "no_capacity"}


def test_above_max_is_trimmed() -> None:
    a = job("a", replicas=6, max_replicas=4)
    plan = decide(nodes(2), workers(a, ["node-1"] * 3 + ["node-2"] * 3), [a], now=100.0)
    assert desired(plan) == {"a": 4} and reasons(plan) == {"a": "at_max"}


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"min_replicas": 5, "max_replicas": 2}, "min 5 is above max 2"),
        ({"weight": -1.0}, "weight -1.0"),
        (
            {"error": "annotation edl.paddlepaddle.org/max-workers: 'many' is not an integer"},
            "many",
        ),
    ],
)
def test_bad_input_falls_back_to_the_current_replicas(change: dict[str, Any], text: str) -> None:
    bad = job("bad", replicas=3, **change)
    good = job("good", replicas=1)
    pods = workers(bad, ["node-1"] * 3) + workers(good, ["node-1"])
    plan = decide(nodes(1, cpu=6), pods, [bad, good], now=100.0)
    assert plan.jobs["ns/bad"].desired == 3
    assert plan.jobs["ns/bad"].limited_by.value == "fallback"
    assert text in plan.jobs["ns/bad"].message
    # The bad job's workers still hold their room: the good one only gets what is left.
    assert desired(plan)["good"] == 3  # 6 CPUs - 3 (bad) - 1 (good) = 2 free


def test_the_plan_does_not_depend_on_input_order() -> None:
    rnd = random.Random(7)
    js = [job(f"j{i}", replicas=rnd.randint(1, 3), priority=rnd.choice([0, 10]), observed={
        1: 100.0, 2: 100.0 + rnd.uniform(50, 100)}) for i in range(5)]  # fmt: skip
    pods = []
    for j in js:
        pods += workers(j, [f"node-{rnd.randint(1, 3)}" for _ in range(j.replicas)])
    pods.append(Pod("web", "p", Resources(cpu=2), priority=50))
    ns = nodes(3)
    ref = decide(ns, pods, js, now=5.0).to_dict()
    for _ in range(5):
        rnd.shuffle(js)
        rnd.shuffle(pods)
        rnd.shuffle(ns)
        assert decide(ns, pods, js, now=5.0).to_dict() == ref


def test_never_plans_more_than_fits() -> None:
    rnd = random.Random(11)
    for trial in range(60):
        ns = nodes(rnd.randint(1, 4), cpu=rnd.choice([2, 4, 8]))
        js = [
            job(
                f"j{i}",
                worker=Resources(cpu=rnd.choice([0.5, 1, 2]), memory=GI),
                replicas=0,
                min_replicas=rnd.randint(0, 2),
                max_replicas=rnd.randint(2, 10),
                observed={1: 100.0, 2: rnd.uniform(100, 200)},
            )
            for i in range(rnd.randint(1, 4))
        ]
        plan = decide(ns, [], js, now=float(trial))
        for name, free in plan.node_free.items():
            assert free.cpu >= -1e-9, (trial, name, free)
        used = sum(
            (j.worker.scaled(plan.jobs[j.key].desired) for j in js
             if plan.jobs[j.key].limited_by.value != "waiting"), Resources())  # fmt: skip
        assert used.cpu <= sum(n.allocatable.cpu for n in ns) + 1e-9


def test_running_jobs_are_never_planned_below_min_nor_over_a_node() -> None:
    # Full clusters of running jobs with different curves, where growth takes room from
    # other jobs: every node's planned room stays >= 0, every job >= its min, and the plan
    # does not depend on input order.
    rnd = random.Random(5)
    curves = [FLAT, LINEAR, {1: 100.0}, {1: 100.0, 2: 170.0, 4: 260.0}, {}]
    for trial in range(40):
        ns = nodes(rnd.randint(1, 3), cpu=rnd.choice([4, 8]))
        js, pods = [], []
        for i in range(rnd.randint(2, 4)):
            j = job(f"j{i}", replicas=0, min_replicas=rnd.randint(0, 2),
                    priority=rnd.choice([0, 0, 5]), observed=rnd.choice(curves))  # fmt: skip
            js.append(j)
        for n in ns:
            for k in range(int(n.allocatable.cpu)):
                owner = rnd.choice(js)
                pods.append(Pod("ns", f"{n.name}-{k}", CPU1, owner.priority, n.name, owner.key))
        counts = {j.key: sum(p.job == j.key for p in pods) for j in js}
        js = [replace(j, replicas=counts[j.key]) for j in js]
        plan = decide(ns, pods, js, now=1000.0 + trial)
        for name, free in plan.node_free.items():
            assert free.cpu >= -1e-9, (trial, name, free)
        for j in js:
            d = plan.jobs[j.key]
            assert d.desired >= min(j.min_replicas, counts[j.key]), (trial, d)
            assert sum(d.nodes.values()) == d.desired or d.limited_by.value == "waiting"
        ref = plan.to_dict()
        rnd.shuffle(js)
        rnd.shuffle(pods)
        assert decide(ns, pods, js, now=1000.0 + trial).to_dict() == ref


def test_plan_to_dict_is_json_ready() -> None:
    import json

    a = job("a", replicas=1)
    doc = json.loads(json.dumps(decide(nodes(1), workers(a, ["node-1"]), [a], now=1.0).to_dict()))
    assert doc["jobs"][0]["job"] == "ns/a" and doc["jobs"][0]["desired"] == 4
    assert doc["jobs"][0]["nodes"] == {"node-1": 4}
    assert doc["nodeFree"]["node-1"]["cpu"] == 0.0


def test_marginal_speedup_reported_at_the_decided_size() -> None:
    a = job("a", replicas=1, max_replicas=3, observed={})
    d = decide(nodes(1), [], [a], now=1.0).jobs["ns/a"]
    assert d.desired == 2
    assert d.marginal_speedup == pytest.approx(ScalingCurve(0.05, 0.0).marginal(2))
    assert d.curve.lam is None


GPU_NODE = Resources(cpu=48, memory=192 * GI, gpu=4)
GPU_WORKER = Resources(cpu=8, memory=32 * GI, gpu=1)
BERT = {1: 10.5, 2: 20.5, 3: 29.4, 4: 38.7, 5: 14.3, 8: 32.2}
"""Measured on 4-GPU nodes: near-linear on one node, a loss on first spanning two."""


def gpu_nodes(count: int) -> list[Node]:
    return [Node(f"gpu-{i + 1}", GPU_NODE) for i in range(count)]


def gpu_job(name: str, **kw: Any) -> Job:
    base: dict[str, Any] = {"worker": GPU_WORKER, "min_replicas": 1, "max_replicas": 16}
    base.update(kw)
    return Job("ns", name, **base)


def test_a_job_does_not_cross_a_node_boundary_for_a_measured_loss() -> None:
    a = gpu_job("a", replicas=4, observed=BERT)
    plan = decide(gpu_nodes(4), workers(a, ["gpu-1"] * 4), [a], now=100.0)
    assert desired(plan) == {"a": 4}
    assert reasons(plan) == {"a": "low_marginal_gain"}


def test_growth_jumps_across_a_dip_to_the_size_that_pays() -> None:
    dip = {1: 100.0, 2: 200.0, 3: 300.0, 4: 400.0, 5: 250.0, 8: 700.0}
    a = gpu_job("a", replicas=4, observed=dip)
    plan = decide(gpu_nodes(2), workers(a, ["gpu-1"] * 4), [a], now=100.0)
    d = plan.jobs["ns/a"]
    assert d.desired == 8  # not 5, where it would run slower than at 4
    assert d.nodes == {"gpu-1": 4, "gpu-2": 4}


def test_growth_reaches_a_measured_size_beyond_a_dip_more_than_a_node_ahead() -> None:
    # imagenet on 4-GPU nodes, as its class measured it: 16 is slower than 13, 24 pays
    imagenet = {3: 472.0, 7: 660.0, 10: 983.0, 12: 985.0, 13: 1146.0, 16: 1063.0, 24: 1900.0}
    a = gpu_job("a", replicas=13, max_replicas=32, observed=imagenet)
    placed = ["gpu-1"] * 4 + ["gpu-2"] * 4 + ["gpu-3"] * 4 + ["gpu-4"]
    plan = decide(gpu_nodes(8), workers(a, placed), [a], now=100.0)
    assert desired(plan)["a"] >= 24  # one node ahead (17) sees only the dip
    # unmeasured beyond 16, the model still stops in front of the dip
    short = replace(a, observed={n: x for n, x in imagenet.items() if n <= 16})
    assert desired(decide(gpu_nodes(8), workers(a, placed), [short], now=100.0)) == {"a": 13}


def test_growth_stops_at_the_fastest_size_it_can_reach() -> None:
    dip = {1: 100.0, 2: 200.0, 3: 300.0, 4: 400.0, 5: 250.0, 6: 300.0, 8: 700.0}
    a = gpu_job("a", replicas=4, observed=dip)
    # 2 GPUs free beside the job's node: 6 would be slower than 4, so it stays
    other = [Pod("ns", f"x-{i}", Resources(gpu=1), 0, "gpu-2") for i in range(2)]
    plan = decide(gpu_nodes(2), [*workers(a, ["gpu-1"] * 4), *other], [a], now=100.0)
    assert desired(plan) == {"a": 4}


def test_growth_stays_on_the_jobs_node_first() -> None:
    a = gpu_job("a", replicas=1, observed={1: 100.0, 2: 200.0})
    plan = decide(gpu_nodes(3), workers(a, ["gpu-3"]), [a], now=100.0)
    assert plan.jobs["ns/a"].nodes == {"gpu-3": 4}


def test_a_job_is_not_shrunk_below_its_request_for_another_jobs_growth() -> None:
    flat = {1: 100.0, 2: 150.0, 4: 200.0}
    big = job("big", replicas=4, requested=4, observed=flat)
    small = job("small", replicas=1)
    pods = [*workers(big, ["node-1"] * 4), *workers(small, ["node-2"])]
    full = [*nodes(1, cpu=4), Node("node-2", Resources(cpu=1, memory=64 * GI))]
    plan = decide(full, pods, [big, small], now=100.0)
    assert desired(plan) == {"big": 4, "small": 1}
    # without a request the flat job's workers are worth more to the linear one
    unasked = replace(big, requested=0)
    plan = decide(full, pods, [unasked, small], now=100.0)
    assert desired(plan)["big"] < 4 and desired(plan)["small"] > 1


def test_a_job_that_used_its_rescale_budget_does_not_grow() -> None:
    a = job("a", replicas=2, recent_rescales=SizingPolicy().rescale_budget_per_hour)
    plan = decide(nodes(1, cpu=6), workers(a, ["node-1"] * 2), [a], now=100.0)
    assert desired(plan) == {"a": 2} and reasons(plan) == {"a": "hold_off"}
    fresh = replace(a, recent_rescales=a.recent_rescales - 1)
    assert desired(decide(nodes(1, cpu=6), workers(a, ["node-1"] * 2), [fresh], now=100.0)) == {
        "a": 6
    }


def test_a_job_over_its_rescale_budget_still_grows_back_to_its_request() -> None:
    # protected demand took it from its request of 6 to 2, and used its budget doing so
    budget = SizingPolicy().rescale_budget_per_hour
    a = job("a", replicas=2, requested=6, recent_rescales=budget)
    plan = decide(nodes(1, cpu=8), workers(a, ["node-1"] * 2), [a], now=100.0)
    assert desired(plan) == {"a": 6} and reasons(plan) == {"a": "hold_off"}
    # at its request, over budget, it stays
    home = replace(a, replicas=6)
    plan = decide(nodes(1, cpu=8), workers(a, ["node-1"] * 6), [home], now=100.0)
    assert desired(plan) == {"a": 6} and reasons(plan) == {"a": "hold_off"}


def test_a_growth_within_the_hysteresis_is_not_made() -> None:
    almost_flat = {1: 100.0, 2: 200.0, 3: 204.0}  # a third worker: +2 %
    a = job("a", replicas=2, observed=almost_flat, max_replicas=3, min_marginal_speedup=0.0)
    plan = decide(nodes(1, cpu=4), workers(a, ["node-1"] * 2), [a], now=100.0)
    assert desired(plan) == {"a": 2}
    loose = SizingPolicy(hysteresis=0.0)
    assert desired(decide(nodes(1, cpu=4), workers(a, ["node-1"] * 2), [a], loose, 100.0)) == {
        "a": 3
    }


def test_growth_stops_at_what_the_namespaces_resource_quota_admits() -> None:
    a = job("a", replicas=2)
    # the quota counts the 2 workers already created: 1.5 CPUs left admit one more of 1 CPU
    quota = Quota("ns", "compute", {"cpu": 1.5, "pods": 10})
    plan = decide(nodes(1, cpu=8), workers(a, ["node-1"] * 2), [a], now=100.0, quotas=[quota])
    d = plan.jobs["ns/a"]
    assert (d.desired, d.limited_by.value) == (3, "no_capacity")
    pods_only = Quota("ns", "pods", {"pods": 0})
    plan = decide(nodes(1, cpu=8), workers(a, ["node-1"] * 2), [a], now=100.0, quotas=[pods_only])
    d = plan.jobs["ns/a"]
    assert d.desired == 2
    assert d.message == (
        "stays at 2: the namespace's ResourceQuota pods admits no more workers (1 CPU, 1 GiB each)"
    )
    # another namespace's quota does not limit it
    other = Quota("elsewhere", "compute", {"cpu": 0})
    assert desired(decide(nodes(1, cpu=8), workers(a, ["node-1"] * 2), [a], now=100.0,
                          quotas=[other])) == {"a": 8}  # fmt: skip
