"""``decide`` makes the blessed plans: a change meant only to be faster changes no decision.

The golden file was written by the code at the commit that blessed it. A change that is
meant to change decisions (a new rule of ``decide``) re-blesses it, knowingly, in its own
commit that says so::

    .venv/bin/python -m tests.unit.edl_sizing.plan_cases --bless
"""

from __future__ import annotations

import json

import pytest

from tests.unit.edl_sizing.plan_cases import FULL, GOLDEN, cases, plan_digest

STORED = json.loads(GOLDEN.read_text())
CASES = {case.name: case for case in cases()}


def test_the_golden_file_covers_every_case_and_nothing_else() -> None:
    assert sorted(STORED["digests"]) == sorted(CASES)
    assert sorted(STORED["plans"]) == sorted(FULL)


@pytest.mark.parametrize("name", sorted(FULL))
def test_the_plans_kept_in_full_are_decided_again(name: str) -> None:
    assert CASES[name].plan().to_dict() == STORED["plans"][name]


def test_every_case_is_decided_as_blessed() -> None:
    changed = [
        name for name, case in CASES.items() if plan_digest(case.plan()) != STORED["digests"][name]
    ]
    assert not changed, (
        f"{len(changed)} of {len(CASES)} plans changed: {changed[:10]}; if that is meant, "
        "re-bless with `python -m tests.unit.edl_sizing.plan_cases --bless` and say so"
    )


def test_the_cases_reach_every_reason() -> None:
    seen = {d.limited_by.value for case in CASES.values() for d in case.plan().jobs.values()}
    assert seen == {
        "at_max", "no_capacity", "low_marginal_gain", "hold_off", "protected_demand",
        "waiting", "fallback", "fairness",
    }  # fmt: skip
