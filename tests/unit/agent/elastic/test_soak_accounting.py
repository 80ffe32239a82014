"""The soak's check that every world change has a recorded pause (`elastic_soak.unrecorded`).

It must find a survivor with no record, and accept only a record that really covers the
change: its own for a world it trained in, or one running through a world that broke in its
first step.
"""

from __future__ import annotations

from tests.support.elastic_soak import Record, unrecorded

# a, b train in 1 (steps 0-9); 2 = {a, b} trains steps 10-12; 3 = {a, b}
RESTORES = {1: 0, 2: 10, 3: 13}


def rec(member: str, generation: int, source: int) -> Record:
    return Record(member, generation, 1.0, f"from {source}: +c; in-process")


def began(two: dict[str, set[int]]) -> dict[int, dict[str, set[int]]]:
    return {1: {"a": set(range(10)), "b": set(range(10))}, 2: two, 3: {"a": {13}, "b": {13}}}


def test_a_survivor_without_a_record_of_a_world_it_trained_in_is_found() -> None:
    steps = began({"a": {10, 11, 12}, "b": {10, 11, 12}})
    records = [rec("a", 2, 1), rec("b", 2, 1), rec("a", 3, 2), rec("b", 3, 2)]
    assert unrecorded(steps, RESTORES, records) == []
    assert unrecorded(steps, RESTORES, records[1:]) == [(2, "a")]
    # a record running past a world it trained in does not cover it (two changes, one record)
    spanning = [rec("a", 3, 1), rec("b", 2, 1), rec("b", 3, 2)]
    assert unrecorded(steps, RESTORES, spanning) == [(2, "a")]


def test_one_step_is_trained_when_a_later_world_restored_past_it() -> None:
    steps = began({"a": {10}, "b": {10}})
    restores = {**RESTORES, 3: 11}  # it completed step 10, then stopped for generation 3
    spanning = [rec("a", 3, 1), rec("b", 3, 1)]
    assert unrecorded(steps, restores, spanning) == [(2, "a"), (2, "b")]


def test_a_world_that_broke_in_its_first_step_is_covered_by_the_record_running_through_it() -> None:
    steps = began({"a": {10}, "b": {10}})
    restores = {**RESTORES, 3: 10}  # step 10 was rolled back: nobody trained in 2
    spanning = [rec("a", 3, 1), rec("b", 3, 1)]
    assert unrecorded(steps, restores, spanning) == []
    # ... but not by nothing, nor by a record that does not run through it
    assert unrecorded(steps, restores, spanning[1:]) == [(2, "a"), (3, "a")]
    assert unrecorded(steps, restores, [rec("a", 3, 2), rec("b", 3, 1)]) == [(2, "a")]


def test_a_member_excused_or_joining_needs_no_record() -> None:
    steps = began({"a": {10, 11}, "b": {10, 11}, "c": {10, 11}})
    records = [rec("a", 2, 1), rec("a", 3, 2), rec("b", 3, 2)]
    assert unrecorded(steps, RESTORES, records, lambda g, m: (g, m) == (2, "b")) == []
