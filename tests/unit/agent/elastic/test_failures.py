"""The job's failure budget (`agent.elastic.failures`): pure counting, the record's form, and
one agent's crash recorded by compare-and-swap in a real local store (`Membership`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent.elastic.errors import WorldRecordInvalid
from agent.elastic.failures import (
    EVENT_MESSAGE_CHARS,
    FailurePolicy,
    TrainerFailure,
    failed_message,
    kept_tail,
)
from agent.elastic.local_store import LocalStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.world import Member, World

A = Member(joined=1.0, id="a", incarnation="x", host="127.0.0.1", ports=(7000, 7001))
B = Member(joined=2.0, id="b", incarnation="y", host="127.0.0.1", ports=(7002, 7003))


def crash(member: str, at: float, status: int = 1, line: str = "E: boom") -> TrainerFailure:
    return TrainerFailure(member, status, at, ("Traceback (most recent call last):", line))


def test_the_budget_counts_the_failures_within_the_window_only() -> None:
    policy = FailurePolicy(budget=2, window=60)
    assert not policy.failed([crash("a", 0), crash("b", 10)], now=50)
    assert policy.failed([crash("a", 0), crash("b", 10), crash("a", 50)], now=50)
    # the first one is out of the window by now: two left, within the budget
    assert not policy.failed([crash("a", 0), crash("b", 10), crash("a", 65)], now=65)
    assert [f.at for f in policy.kept([crash("a", 0), crash("b", 10)], now=65)] == [10]


def test_no_budget_never_fails_a_job() -> None:
    assert not FailurePolicy(budget=0).failed([crash("a", float(t)) for t in range(50)], now=50)


def test_the_record_keeps_at_least_every_failure_the_budget_counts() -> None:
    many = [crash("a", float(t)) for t in range(30)]
    assert len(FailurePolicy(budget=3, window=100).kept(many, now=30)) == 10
    assert len(FailurePolicy(budget=20, window=100).kept(many, now=30)) == 21


def test_the_tail_keeps_the_last_non_blank_lines_cut_short() -> None:
    lines = ["one", "", "two", "x" * 500, "  ", "ValueError: boom"]
    assert kept_tail(lines) == ("two", "x" * 200, "ValueError: boom")


def test_the_event_message_names_statuses_and_last_lines_newest_first_and_fits() -> None:
    message = failed_message("digits", [crash("a", 1, 1), crash("b", 2, 137, "Killed")])
    assert message.startswith("job digits failed after 2 trainer failures over its budget")
    newest = "b status 137: Traceback (most recent call last): | Killed"  # its whole tail
    assert message.index(newest) < message.index("a status 1: E: boom")
    long = failed_message("digits", [crash("a", float(t), 1, "E" * 200) for t in range(20)])
    assert len(long) == EVENT_MESSAGE_CHARS and long.endswith("...")


def test_a_world_with_failures_round_trips_and_a_failed_one_is_finished() -> None:
    world = World(3, (A, B)).with_failures((crash("a", 5.0),), failed=False)
    assert World.from_json(world.to_json()) == world and not world.finished
    failed = world.with_failures((crash("a", 5.0), crash("b", 6.0)), failed=True)
    again = World.from_json(failed.to_json())
    assert again == failed and again.finished and again.failed
    assert again.successor(4, ()).failed and again.successor(4, ()).failures == failed.failures
    assert "failures" not in json.loads(World(1, (A,)).to_json())  # older readers see no change


@pytest.mark.parametrize(
    ("patch", "why"),
    [
        ({"failed": True}, "bad failed"),  # failed without finished
        ({"failures": {"a": 1}}, "bad failures"),
        ({"failures": [{"member": "a", "status": "x", "at": 1}]}, "bad failure"),
    ],
)
def test_a_bad_failure_record_is_refused(patch: dict[str, object], why: str) -> None:
    raw = {**json.loads(World(1, (A,)).to_json()), **patch}
    with pytest.raises(WorldRecordInvalid, match=why):
        World.from_json(json.dumps(raw))


def member_of(store: LocalStore, me: Member) -> Membership:
    return Membership(store, me, MembershipSettings(debounce=0.0, poll_interval=0.01))


def test_failures_of_every_member_land_in_one_record_until_the_job_is_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalStore.create(tmp_path / "store")
    a, b = member_of(store, A), member_of(store, B)
    a.join()
    b.join()
    assert a.tick() is not None and b.tick() is not None
    policy = FailurePolicy(budget=2, window=600)
    with caplog.at_level(logging.WARNING, logger="agent.elastic.membership"):
        first = a.record_failure(crash("a", 100.0), policy)
        second = b.record_failure(crash("b", 101.0, 137, "Killed"), policy)
    assert first is not None and not first.failed
    assert second is not None and not second.finished and len(second.failures) == 2
    assert "recorded trainer failure (b status 137: Killed; 2 of budget 2 within 600 s)" in (
        caplog.text
    )
    # a new world (a member left) carries the failures on
    b.leave()
    assert a.tick() is not None
    stored = World.from_json((tmp_path / "store" / "world.json").read_text())
    assert [f.member for f in stored.failures] == ["a", "b"] and stored.members == (A,)
    third = a.record_failure(crash("a", 102.0), policy)
    assert third is not None and third.failed and third.finished
    assert World.from_json((tmp_path / "store" / "world.json").read_text()).failed
    # the job is over: no new world, no more failures, the mark stays
    assert a.record_failure(crash("a", 103.0), policy) is None
    assert a.tick() == third


def test_a_failure_before_any_world_starts_the_record(tmp_path: Path) -> None:
    store = LocalStore.create(tmp_path / "store")
    failed = member_of(store, A).record_failure(crash("a", 1.0), FailurePolicy(budget=0))
    assert failed is not None and failed.generation == 0 and len(failed.failures) == 1
    b = member_of(store, B)
    b.join()
    world = b.tick()
    assert world is not None and world.members == (B,) and world.failures == failed.failures


def test_a_failed_job_emptied_by_hand_trains_afresh(tmp_path: Path) -> None:
    """What docs/elastic.md says to do to run a failed job again: empty its record."""
    store = LocalStore.create(tmp_path / "store")
    over = member_of(store, A).record_failure(crash("a", 1.0), FailurePolicy(budget=0))
    assert over is not None
    failed = over.with_failures(over.failures, failed=True)
    assert store.write_world(failed.to_json(), store.read_world().version)
    (tmp_path / "store" / "world.json").write_text("")  # kubectl patch ... data.world ""
    b = member_of(store, B)
    b.join()
    world = b.tick()
    assert world is not None and not world.finished and not world.failures
    assert world.members == (B,)
