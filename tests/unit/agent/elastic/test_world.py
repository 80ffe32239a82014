from __future__ import annotations

import json

import pytest

from agent.elastic.errors import WorldRecordInvalid
from agent.elastic.world import Member, World, next_members


def member(name: str, joined: float, port: int = 7000) -> Member:
    return Member(joined=joined, id=name, incarnation="i", host="127.0.0.1", ports=(port, port + 1))


A, B, C, D = (member(n, i + 1, 7000 + 10 * i) for i, n in enumerate("abcd"))


def test_survivors_keep_order_and_joiners_append_by_join_time() -> None:
    prev = World(3, (C, A, B))
    assert next_members(prev, [D, B, C], 1, 8) == (C, B, D)
    assert next_members(None, [D, B, A], 1, 8) == (A, B, D)


def test_min_pauses_and_max_keeps_survivors_first() -> None:
    prev = World(1, (D,))
    assert next_members(prev, [A, B, C, D], 1, 2) == (D, A)
    assert next_members(prev, [D], 2, 4) == ()


def test_record_round_trip_and_endpoints_alternate() -> None:
    world = World(5, (A, B))
    again = World.from_json(world.to_json(writer="x"))
    assert again == world
    assert world.master == "127.0.0.1:7001"
    assert world.endpoints == ["127.0.0.1:7001", "127.0.0.1:7011"]
    assert World(6, (A, B)).master == "127.0.0.1:7000"
    assert world.rank_of(B.key) == 1 and world.rank_of("nobody/x") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage{",
        "[]",
        '{"schema": 1, "generation": -1, "members": []}',
        '{"schema": 1, "generation": "7", "members": []}',
        '{"schema": 2, "generation": 1, "members": []}',
        '{"schema": 1, "generation": 1, "members": {}}',
        '{"schema": 1, "generation": 1, "members": [1]}',
        '{"schema": 1, "generation": 1, "members": [{"id": "a"}]}',
    ],
)
def test_nonsense_records_are_rejected(text: str) -> None:
    with pytest.raises(WorldRecordInvalid):
        World.from_json(text)


def test_duplicate_members_and_shared_endpoints_are_rejected() -> None:
    dup = json.loads(World(1, (A,)).to_json())
    dup["members"].append(dup["members"][0])
    with pytest.raises(WorldRecordInvalid, match="duplicate"):
        World.from_json(json.dumps(dup))
    twin = Member(joined=9, id="z", incarnation="j", host=A.host, ports=A.ports)
    with pytest.raises(WorldRecordInvalid, match="endpoint"):
        World.from_json(World(1, (A, twin)).to_json())


def test_paused_world_has_no_master() -> None:
    with pytest.raises(WorldRecordInvalid):
        _ = World(2).master


def test_finished_mark_round_trips_and_old_records_are_not_finished() -> None:
    world = World(5, (A, B))
    assert not World.from_json(world.to_json()).finished  # records written before the mark
    assert "finished" not in json.loads(world.to_json())
    done = world.finish(184)
    again = World.from_json(done.to_json(writer="x"))
    assert again == done and again.finished and again.finished_at_step == 184
    assert done.finish(7) is done  # written once: a second finish keeps the first step
    unknown = World.from_json(World(2).finish(None).to_json())
    assert unknown.finished and unknown.finished_at_step is None


@pytest.mark.parametrize(
    "extra",
    [
        {"finished": "yes"},
        {"finished": 1},
        {"finished": True, "finished_at_step": -1},
        {"finished": True, "finished_at_step": "184"},
        {"finished": True, "finished_at_step": True},
        {"finished": False, "finished_at_step": 3},
    ],
)
def test_nonsense_finish_marks_are_rejected(extra: dict[str, object]) -> None:
    raw = {**json.loads(World(1, (A,)).to_json()), **extra}
    with pytest.raises(WorldRecordInvalid, match="finished"):
        World.from_json(json.dumps(raw))
