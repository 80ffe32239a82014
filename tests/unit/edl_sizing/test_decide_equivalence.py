"""``decide`` made faster decides exactly as before (issue 38): the same plan, byte for byte.

Beside the golden plans (test_plan_golden.py), these cases are the shapes where the cost of
a round lives (`equivalence_cases`): many nodes and pods, pods that fit no node, growth
spilling over many nodes, displacement. Each plan's JSON (replicas and workers per node of
every job, its reason and message, the room left per node) must hash as the code before
the speed-ups made it. Regenerate only for a change meant to change decisions, in a commit
that says so::

    .venv/bin/python -m tests.unit.edl_sizing.equivalence_cases --bless
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from edl_sizing import Plan
from tests.unit.edl_sizing.equivalence_cases import FULL, GOLDEN, cases
from tests.unit.edl_sizing.plan_cases import plan_digest

STORED = json.loads(GOLDEN.read_text())
CASES = {case.name: case for case in cases()}


@cache
def plan(name: str) -> Plan:
    return CASES[name].plan()


def test_the_golden_file_covers_every_case_and_nothing_else() -> None:
    assert sorted(STORED["digests"]) == sorted(CASES)
    assert sorted(STORED["plans"]) == sorted(FULL)


@pytest.mark.parametrize("name", sorted(FULL))
def test_the_plans_kept_in_full_are_decided_again(name: str) -> None:
    assert plan(name).to_dict() == STORED["plans"][name]


def test_every_case_is_decided_as_before() -> None:
    changed = [name for name in CASES if plan_digest(plan(name)) != STORED["digests"][name]]
    assert not changed, f"{len(changed)} of {len(CASES)} plans changed: {changed[:10]}"


def test_the_cases_grow_spill_and_displace() -> None:
    """The cases reach what the speed-ups touch: growth, claims that shrink jobs, waiting."""
    seen = {d.limited_by.value for name in CASES for d in plan(name).jobs.values()}
    assert {"at_max", "hold_off", "protected_demand", "waiting", "fairness"} <= seen
    grew = sum(d.desired > d.current for name in CASES for d in plan(name).jobs.values())
    assert grew > 100


def test_a_job_packed_tighter_than_its_model_is_decided() -> None:
    # Found by a random search (issue 38's sizing review): a job whose nodes hold more of its
    # workers than the model packs on one made the repack's search over placements empty,
    # and `decide` raised (the round served every job its current replicas instead).
    from dataclasses import replace

    from tests.unit.edl_sizing.equivalence_cases import POLICIES
    from tests.unit.edl_sizing.plan_cases import generated

    case = generated(
        "tight-211", 20211, nodes=6 + 211 % 15, jobs=4 + 211 % 9, pods_per_node=4 + 211 % 8,
        crowded=True, gpu_share=0.3, budget=False,
    )  # fmt: skip
    plan = replace(case, policy=POLICIES[211 % len(POLICIES)]).plan()
    assert set(plan.jobs) == {j.key for j in case.jobs}
