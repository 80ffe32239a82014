from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from agent.elastic.local_store import LocalStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.world import Member, World

SETTINGS = MembershipSettings(
    min_size=1, max_size=3, heartbeat_interval=1.0, ttl=5.0, debounce=1.0, max_debounce=4.0
)
WIDE = MembershipSettings(
    max_size=8, heartbeat_interval=1.0, ttl=5.0, debounce=1.0, max_debounce=4.0
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Job:
    """Several agents on one local store, driven by one fake clock."""

    def __init__(self, root: Path, settings: MembershipSettings = SETTINGS) -> None:
        self.root = root
        root.mkdir(exist_ok=True)
        self.clock = Clock()
        self.settings = settings
        self.agents: dict[str, Membership] = {}

    def add(self, name: str) -> Membership:
        me = Member(
            joined=self.clock.now + len(self.agents) * 0.001,
            id=name,
            incarnation="x",
            host="127.0.0.1",
            ports=(7000 + 2 * len(self.agents), 7001 + 2 * len(self.agents)),
        )
        agent = Membership(LocalStore(self.root), me, self.settings, clock=self.clock)
        agent.join()
        self.agents[name] = agent
        return agent

    def run(self, seconds: float, step: float = 0.2) -> None:
        for _ in range(round(seconds / step)):
            self.clock.now += step
            for agent in self.agents.values():
                agent.tick()

    def ids(self, name: str) -> list[str]:
        world = self.agents[name].world
        assert world is not None
        return [m.id for m in world.members]


def test_burst_of_joins_becomes_one_generation(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name in "abc":
        job.add(name)
    job.run(0.4)
    assert job.agents["a"].world is None  # still inside the debounce window
    job.run(1.2)
    assert {job.ids(n)[0] for n in "abc"} == {"a"}
    assert job.ids("b") == ["a", "b", "c"]
    assert job.agents["c"].world == World.from_json((tmp_path / "world.json").read_text())
    assert job.agents["a"].world is not None and job.agents["a"].world.generation == 1


def test_leave_keeps_survivor_order_and_max_keeps_standby(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name in "abcd":
        job.add(name)
    job.run(2)
    assert job.ids("d") == ["a", "b", "c"]  # max 3: d waits
    job.agents.pop("a").leave()
    job.run(2)
    assert job.ids("b") == ["b", "c", "d"]
    gen = job.agents["b"].world.generation  # type: ignore[union-attr]
    assert gen == 2


def test_dead_member_expires_after_ttl(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name in "abc":
        job.add(name)
    job.run(2)
    job.agents.pop("b")  # SIGKILLed: stops beating, leaves its heartbeat behind
    job.run(3)
    assert job.ids("a") == ["a", "b", "c"]
    job.run(4)
    assert job.ids("a") == ["a", "c"] and job.ids("c") == ["a", "c"]


def test_below_min_pauses(tmp_path: Path) -> None:
    settings = MembershipSettings(
        min_size=2, max_size=3, heartbeat_interval=1.0, ttl=5.0, debounce=0.5
    )
    job = Job(tmp_path, settings)
    job.add("a")
    job.run(2)
    assert job.agents["a"].world is not None and job.agents["a"].world.paused
    job.add("b")
    job.run(2)
    assert job.ids("a") == ["a", "b"]
    job.agents.pop("b").leave()
    job.run(2)
    assert job.agents["a"].world.paused


@pytest.mark.parametrize(
    "nonsense",
    ['{"schema": 1, "generation": 1, "members": [{"id": 3}]}', "\x00\xff not json", "[1, 2]"],
)
def test_nonsense_record_is_repaired_once_keeping_order(
    tmp_path: Path, nonsense: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = Job(tmp_path)
    for name in "abc":
        job.add(name)
    job.run(2)
    (tmp_path / "world.json").write_text(nonsense)
    with caplog.at_level(logging.WARNING, logger="agent.elastic.membership"):
        job.run(0.4)
    repaired = [r for r in caplog.records if "world record invalid" in r.getMessage()]
    assert len(repaired) == 1, [r.getMessage() for r in caplog.records]
    world = World.from_json((tmp_path / "world.json").read_text())
    assert [m.id for m in world.members] == ["a", "b", "c"] and world.generation == 2
    assert all(job.agents[n].world == world for n in "abc")


def test_generation_going_backwards_is_repaired(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name in "ab":
        job.add(name)
    job.run(2)
    job.agents.pop("b").leave()
    job.run(2)
    (tmp_path / "world.json").write_text(World(1, ()).to_json())
    job.run(0.4)
    world = World.from_json((tmp_path / "world.json").read_text())
    assert world.generation == 3 and [m.id for m in world.members] == ["a"]


def test_store_outage_keeps_the_world_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    job = Job(root)
    for name in "ab":
        job.add(name)
    job.run(2)
    before = job.agents["a"].world
    shutil.move(root, tmp_path / "away")
    with caplog.at_level(logging.WARNING, logger="agent.elastic.membership"):
        job.run(60)  # a minute without the store
        assert job.agents["a"].world == before
        assert job.agents["a"].unreachable_for() > 50
        shutil.move(tmp_path / "away", root)
        job.run(3)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("unreachable (" in line for line in lines) == 2  # one line per agent
    assert job.agents["a"].world == before  # nobody expired during the blind minute
    assert job.agents["a"].unreachable_for() == 0


def finished_job(tmp_path: Path) -> Job:
    job = Job(tmp_path)
    for name in "ab":
        job.add(name)
    job.run(2)
    assert job.agents["a"].finish(42)
    return job


def test_finish_is_written_once_in_the_same_generation(tmp_path: Path) -> None:
    job = finished_job(tmp_path)
    world = World.from_json((tmp_path / "world.json").read_text())
    assert world.finished and world.finished_at_step == 42 and world.generation == 1
    assert [m.id for m in world.members] == ["a", "b"]
    assert job.agents["b"].finish(99)  # a second finisher reads the mark and keeps it
    job.run(0.4)
    assert World.from_json((tmp_path / "world.json").read_text()) == world
    assert all(job.agents[n].world == world for n in "ab")


def test_a_finished_job_makes_no_new_generation(tmp_path: Path) -> None:
    job = finished_job(tmp_path)
    job.agents.pop("b").leave()
    job.add("c")
    job.run(8)  # well past debounce and max debounce
    world = World.from_json((tmp_path / "world.json").read_text())
    assert world.generation == 1 and world.finished
    assert job.agents["c"].world == world  # a joiner reads the finished world
    job.agents["a"].request_generation("collective broke")
    assert World.from_json((tmp_path / "world.json").read_text()) == world


@pytest.mark.parametrize(
    "edit",
    ["garbage{", World(0, ()).to_json(), World(1, ()).to_json(), World(9, ()).to_json()],
)
def test_repairs_and_edits_never_unfinish_the_job(
    tmp_path: Path, edit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nonsense, a generation going back and a record without the mark (an older agent, a hand
    edit) are each repaired, once, into the finished world above the generation it claims."""
    job = finished_job(tmp_path)
    job.run(0.4)
    (tmp_path / "world.json").write_text(edit)
    with caplog.at_level(logging.WARNING, logger="agent.elastic.membership"):
        job.run(2)
    assert sum("world record invalid" in r.getMessage() for r in caplog.records) == 1
    stored = World.from_json((tmp_path / "world.json").read_text())
    assert stored.finished and stored.finished_at_step == 42
    assert [m.id for m in stored.members] == ["a", "b"]
    assert stored.generation == (10 if '"generation": 9' in edit else 2)
    assert all(job.agents[n].world == stored for n in "ab")


def test_peek_reads_without_joining(tmp_path: Path) -> None:
    job = finished_job(tmp_path)
    me = Member(joined=1.0, id="late", incarnation="y", host="127.0.0.1", ports=(7100, 7101))
    late = Membership(LocalStore(tmp_path), me, SETTINGS, clock=job.clock)
    world = late.peek()
    assert world is not None and world.finished and world.finished_at_step == 42
    assert not (tmp_path / "members" / "late.json").exists()


def test_finishing_over_a_broken_record_repairs_it_as_finished(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.add("a")
    job.run(2)
    (tmp_path / "world.json").write_text('{"generation": 7, "members": "x"}')
    assert job.agents["a"].finish(5)
    stored = World.from_json((tmp_path / "world.json").read_text())
    assert (stored.generation, stored.finished, stored.finished_at_step) == (8, True, 5)
    assert [m.id for m in stored.members] == ["a"]


def test_a_planned_leave_is_the_next_world_at_once(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name in "abc":
        job.add(name)
    job.run(2)
    job.agents.pop("b").leave()  # no clock moves: no debounce, no poll of the others
    world = World.from_json((tmp_path / "world.json").read_text())
    assert world.generation == 2 and [m.id for m in world.members] == ["a", "c"]
    job.run(0.2)
    assert job.ids("a") == ["a", "c"] and job.agents["a"].world == world
    job.run(3)  # and nobody writes another generation for the same change
    assert World.from_json((tmp_path / "world.json").read_text()) == world


def test_two_leaves_at_once_never_bring_a_leaver_back(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name in "abcd":
        job.add(name)
    job.run(2)
    b, c = job.agents.pop("b"), job.agents.pop("c")
    b.leave()
    c.leave()  # reads b's world, writes the next one without itself
    world = World.from_json((tmp_path / "world.json").read_text())
    assert [m.id for m in world.members] == ["a", "d"] and world.generation == 3
    job.run(3)
    assert job.ids("a") == ["a", "d"] and job.ids("d") == ["a", "d"]


def test_a_member_outside_the_world_leaves_without_writing_one(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name in "abcd":
        job.add(name)
    job.run(2)
    assert job.ids("d") == ["a", "b", "c"]  # max 3: d is a stand-by
    job.agents.pop("d").leave()
    assert World.from_json((tmp_path / "world.json").read_text()).generation == 1


def test_a_lone_joiner_to_a_steady_world_is_written_at_once_a_burst_is_batched(
    tmp_path: Path,
) -> None:
    job = Job(tmp_path, WIDE)
    for name in "ab":
        job.add(name)
    job.run(2)  # the world of a, b forms and stays still for more than a debounce
    job.add("c")
    job.run(0.1, step=0.01)  # seen at the first tick, written 50 ms (5 % of 1 s) later
    assert job.ids("a") == ["a", "b", "c"]
    before = job.agents["a"].world.generation  # type: ignore[union-attr]
    for name in "de":  # the world is still settling: a quarter of the debounce per change
        job.add(name)
        job.run(0.2)
    assert job.ids("a") == ["a", "b", "c"]  # d, e pending: 0.5 s of quiet after e
    job.add("f")
    job.run(2)
    world = job.agents["a"].world
    assert world is not None and [m.id for m in world.members] == list("abcdef")
    assert world.generation == before + 1  # the burst became one generation


def test_a_second_change_inside_the_lone_quiet_makes_it_a_burst(tmp_path: Path) -> None:
    job = Job(tmp_path, WIDE)
    for name in "ab":
        job.add(name)
    job.run(2)
    before = job.agents["a"].world.generation  # type: ignore[union-attr]
    job.add("c")
    job.run(0.02, step=0.01)  # inside c's 50 ms
    job.add("d")
    job.run(0.1, step=0.01)  # past c's 50 ms: a burst now, no one writes c alone
    assert job.ids("a") == ["a", "b"]
    job.run(1)
    assert job.ids("a") == ["a", "b", "c", "d"]
    assert job.agents["a"].world.generation == before + 1  # type: ignore[union-attr]


def test_a_pending_change_says_when_it_is_due(tmp_path: Path) -> None:
    job = Job(tmp_path, WIDE)
    for name in "ab":
        job.add(name)
    job.run(0.6)  # the world of a, b: just written, not yet still for a debounce
    assert job.ids("a") == ["a", "b"] and job.agents["a"].due_in() is None  # nothing pending
    job.add("c")
    job.run(0.2)  # a saw c: pending, due a quarter of the 1 s debounce later
    assert job.agents["a"].due_in() == pytest.approx(0.25)
    job.clock.now += 0.25
    job.agents["a"].tick()
    assert job.ids("a") == ["a", "b", "c"] and job.agents["a"].due_in() is None
    job.run(2)  # still for a debounce: a lone change is due 5 % of it after it was seen
    job.add("d")
    job.agents["a"].tick()
    assert job.agents["a"].due_in() == pytest.approx(0.05)
