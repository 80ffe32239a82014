"""One coordinator per job on a coordinated store (issue 38): takeover, expiry, fan-out.

The rules are pure (`agent.elastic.coordinator`); the agents here are real `Membership`s over
`KubernetesStore` and an in-memory API server (`FakeApi`), driven by one fake clock. Every
count below is of calls and events, never of time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from agent.elastic.coordinator import (
    Claim,
    coordinator_is_gone,
    expired_long_ago,
    live_members,
    member_id,
)
from agent.elastic.kubernetes_store import COORDINATOR_KEY, KubernetesStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.store import Heartbeat, StoreWatch
from agent.elastic.world import Member, World
from tests.unit.agent.elastic.helpers import Clock, FakeApi

SETTINGS = MembershipSettings(
    max_size=64, heartbeat_interval=1.0, ttl=5.0, debounce=1.0, max_debounce=4.0
)
WORLD = "edl-digits-world"
TICK = 0.2


def member(name: str, incarnation: str = "x") -> Member:
    """Member `name`, joined in the order of its name, with an address of its own."""
    n = int.from_bytes(name.encode()) % 60_000
    return Member(float(n), name, incarnation, f"10.{n // 65536}.{n // 256 % 256}.{n % 256}",
                  (36543, 36544))  # fmt: skip


def beat(m: Member, renewed: float) -> Heartbeat:
    return Heartbeat(m, str(renewed), renewed)


# -- the pure rules ----------------------------------------------------------------------------


def test_liveness_is_judged_from_the_renewal_time_itself() -> None:
    a, b, c = member("a"), member("b"), member("c")
    beats = [beat(a, 100.0), beat(b, 95.0), beat(c, 90.0)]
    assert live_members(beats, wall_now=100.0, ttl=5.0) == [a, b]  # b: exactly a TTL old
    assert live_members(beats, wall_now=100.1, ttl=5.0) == [a]
    assert expired_long_ago(beats, wall_now=100.0, ttl=5.0) == []
    assert expired_long_ago(beats, wall_now=90.0 + 15.1, ttl=5.0) == [c]
    # After an outage that ended at 99, nobody's age counts from before it.
    assert live_members(beats, wall_now=104.0, ttl=5.0, floor=99.0) == [a, b, c]


@pytest.mark.parametrize(
    ("claim", "gone"),
    [
        (Claim("", None), True),  # none named yet
        (Claim("a/x", None), True),  # its Lease is gone (a clean leave, the pod deleted)
        (Claim("a/x", beat(member("a", "y"), 100.0)), True),  # restarted: a new incarnation
        (Claim("a/x", beat(member("a"), 94.0)), True),  # silent for more than the TTL
        (Claim("a/x", beat(member("a"), 95.0)), False),
    ],
)
def test_a_follower_claims_only_when_the_coordinator_is_gone(claim: Claim, gone: bool) -> None:
    assert coordinator_is_gone(claim, wall_now=100.0, ttl=5.0) is gone


def test_member_id_of_a_key() -> None:
    assert member_id("pod-a/1f2e") == "pod-a"
    assert member_id("odd/name/1f2e") == "odd/name"


# -- agents on a coordinated store ------------------------------------------------------------


class Counted:
    """The API as one agent sees it, counting its calls by method."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.api, name)

        def counted(*args: Any, **kw: Any) -> Any:
            self.calls[name] += 1
            return fn(*args, **kw)

        return counted


class Job:
    """Agents of job `digits` on one `FakeApi`, one fake clock for every one of them."""

    def __init__(self, settings: MembershipSettings = SETTINGS, coordinated: bool = True) -> None:
        self.api, self.clock = FakeApi(), Clock()
        self.settings = settings
        self.coordinated = coordinated
        self.agents: dict[str, Membership] = {}
        self.apis: dict[str, Counted] = {}

    def store(self, name: str, make_watch: Callable[[bool], StoreWatch] | None = None) -> Any:
        self.apis[name] = Counted(self.api)
        # Counted is a counting proxy of FakeApi (its methods through __getattr__).
        store = KubernetesStore(
            self.apis[name], "digits", clock=self.clock.wall, coordinated=self.coordinated
        )
        if make_watch is not None:
            store.watch = make_watch  # type: ignore[method-assign,assignment]
        return store

    def add(self, name: str, store: Any = None) -> Membership:
        agent = Membership(
            store if store is not None else self.store(name),
            member(name),
            self.settings,
            clock=self.clock,
            wall_clock=lambda: self.clock.wall().timestamp(),
        )
        agent.join()
        self.agents[name] = agent
        return agent

    def run(self, seconds: float, each: Callable[[], None] | None = None) -> None:
        for _ in range(round(seconds / TICK)):
            self.clock.now += TICK
            for agent in self.agents.values():
                agent.tick()
            if each is not None:
                each()

    def coordinators(self) -> list[str]:
        return [n for n, a in self.agents.items() if a.coordinating]

    def ids(self) -> list[str]:
        world = World.from_json(self.api.config_maps[WORLD][0]["world"])
        return [m.id for m in world.members]

    def claim(self) -> str:
        return self.api.config_maps[WORLD][0].get(COORDINATOR_KEY, "")


def test_one_coordinator_forms_the_world_and_only_it_lists_the_leases() -> None:
    job = Job()
    for name in "abcd":
        job.add(name)
    job.run(3)
    assert job.ids() == ["a", "b", "c", "d"]
    assert job.coordinators() == ["a"] and job.claim() == "a/x"
    for api in job.apis.values():
        api.calls.clear()
    job.run(10)
    assert job.apis["a"].calls["list_leases"] > 0
    for name in "bcd":  # a follower reads the world and its coordinator's Lease, no list
        assert job.apis[name].calls["list_leases"] == 0
        assert job.apis[name].calls["read_lease"] > 0


def test_a_join_is_written_by_the_coordinator() -> None:
    job = Job()
    for name in "abc":
        job.add(name)
    job.run(3)
    job.run(2)  # a steady world
    job.add("d")
    job.run(1)
    assert job.ids() == ["a", "b", "c", "d"]
    assert job.agents["d"].world is not None and job.agents["d"].world.size == 4
    assert job.coordinators() == ["a"]


def test_a_silent_coordinator_is_replaced_within_a_ttl_and_an_interval() -> None:
    job = Job()
    for name in "abcd":
        job.add(name)
    job.run(3)
    job.agents.pop("a")  # node lost: no leave, no renewal any more
    lost_at = job.clock.now
    coordinators: list[list[str]] = []
    job.run(12, each=lambda: coordinators.append(job.coordinators()))
    assert all(len(c) <= 1 for c in coordinators), "two coordinators at once"
    took_over = next(i for i, c in enumerate(coordinators) if c)
    bound = SETTINGS.ttl + SETTINGS.heartbeat_interval + TICK
    assert (took_over + 1) * TICK <= bound + 1.0  # a's last renewal was up to 1 s before
    assert job.claim() in {"b/x", "c/x", "d/x"}
    assert job.ids() == ["b", "c", "d"]
    assert job.clock.now - lost_at >= SETTINGS.ttl


def test_a_coordinator_that_leaves_is_replaced_at_once() -> None:
    job = Job()
    for name in "abc":
        job.add(name)
    job.run(3)
    job.agents.pop("a").leave()
    assert job.ids() == ["b", "c"]  # the leave itself wrote it
    job.run(TICK)
    assert job.coordinators() in (["b"], ["c"])


def test_a_new_coordinator_expires_from_renew_time_not_from_first_sight() -> None:
    """c stopped renewing 4 s before b takes over; b expires it 1 s later, not a TTL later."""
    job = Job()
    for name in "abc":
        job.add(name)
    job.run(3)
    job.agents.pop("c")  # silent from now on
    job.run(4)  # a, the coordinator, has not expired it yet (TTL 5 s)
    assert job.ids() == ["a", "b", "c"]
    job.agents.pop("a").leave()  # b or ... b takes over, the only other member
    job.run(TICK)
    assert job.coordinators() == ["b"]
    job.run(1.0 + SETTINGS.debounce)  # c's renewal is now more than a TTL old
    assert job.ids() == ["b"]


def test_a_new_coordinator_keeps_a_member_renewed_a_moment_ago() -> None:
    job = Job()
    for name in "ab":
        job.add(name)
    job.run(3)
    # A coordinator that never saw b before (a fresh agent taking over) judges it by its
    # Lease's renewTime: renewed within the TTL, b stays.
    job.agents.pop("a").leave()
    job.add("z")  # joins after the leave: b and z race for the claim, one wins
    job.run(2)
    assert len(job.coordinators()) == 1
    assert job.ids() == ["b", "z"]


class BroadcastWatch:
    """A `StoreWatch` fed by `Broadcast`: counts the events delivered to it."""

    def __init__(self, hub: Broadcast, members: bool) -> None:
        self.hub, self.members = hub, members
        self.pending = 0
        hub.watches.append(self)

    def wait(self, timeout: float) -> bool:
        woke, self.pending = self.pending > 0, 0
        return woke

    def close(self) -> None:
        self.hub.watches.remove(self)


class Broadcast:
    """The API server's watch fan-out: every write to a Lease or the world ConfigMap is one
    event to each watch that follows it (a renewal too: the server sends it, the agent's
    `KubernetesWatch` filters it)."""

    def __init__(self, api: FakeApi) -> None:
        self.watches: list[BroadcastWatch] = []
        self.delivered: Counter[str] = Counter()
        writes = {"renew_lease": "lease", "delete_lease": "lease",
                  "create_config_map": "world", "replace_config_map": "world"}  # fmt: skip
        for name, kind in writes.items():
            setattr(api, name, self._publishing(getattr(api, name), kind))

    def _publishing(self, fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def write(*args: Any, **kw: Any) -> Any:
            result = fn(*args, **kw)
            for w in self.watches:
                if kind == "world" or w.members:
                    w.pending += 1
                    self.delivered[kind] += 1
            return result

        return write


def fan_out(n: int, coordinated: bool) -> tuple[Counter[str], Counter[str], int]:
    """(events delivered in 10 steady seconds, by one leave, renewals in the 10 s).

    The leave's figures leave out the renewals of the second after it.
    """
    job = Job(coordinated=coordinated)
    hub = Broadcast(job.api)
    for i in range(n):
        name = f"m{i:03d}"
        job.add(name, job.store(name, lambda members: BroadcastWatch(hub, members)))

    def wake() -> None:
        for agent in job.agents.values():
            agent.wait_for_change(0)

    job.run(4, each=wake)
    assert len(job.ids()) == n
    renewals = Counter[str]()
    original = job.api.renew_lease

    def renew(*args: Any, **kw: Any) -> Any:
        renewals["lease"] += 1
        return original(*args, **kw)

    job.api.renew_lease = renew  # type: ignore[method-assign]
    hub.delivered.clear()
    job.run(10, each=wake)
    steady, renewed = Counter(hub.delivered), renewals["lease"]
    hub.delivered.clear()
    leaver = job.agents.pop(f"m{n - 1:03d}")
    leaver.close()
    leaver.leave()
    job.run(1, each=wake)
    leave = Counter(hub.delivered)
    leave["lease"] -= renewals["lease"] - renewed  # the others' renewals meanwhile
    return steady, leave, renewed


def test_watch_fan_out_is_one_event_per_renewal_and_n_per_world_change() -> None:
    n = 30
    steady, leave, renewals = fan_out(n, coordinated=True)
    assert renewals >= n * 9  # every member renewed each second
    assert steady["lease"] == renewals  # one watch follows the Leases: the coordinator's
    assert steady["world"] == 0
    # A leave: its Lease deleted (to the coordinator) and one world written (to every member
    # still watching it).
    assert leave["lease"] == 1
    assert leave["world"] == n - 1


def test_uncoordinated_every_renewal_reaches_every_member() -> None:
    """The *before* of the test above (issue 38): N events per renewal, N² a second."""
    n = 30
    steady, _, renewals = fan_out(n, coordinated=False)
    assert steady["lease"] == renewals * n


def test_with_a_watch_a_steady_job_reads_once_an_interval_not_every_poll() -> None:
    """Each member's reads in 10 steady seconds (50 rounds of 0.2 s), by kind."""
    job = Job()
    hub = Broadcast(job.api)
    for name in "abcd":
        job.add(name, job.store(name, lambda members: BroadcastWatch(hub, members)))

    def wake() -> None:
        for agent in job.agents.values():
            agent.wait_for_change(0)

    job.run(4, each=wake)
    assert job.ids() == ["a", "b", "c", "d"] and job.coordinators() == ["a"]
    for api in job.apis.values():
        api.calls.clear()
    job.run(10, each=wake)
    once_an_interval = 10 / SETTINGS.heartbeat_interval + 1
    assert 0 < job.apis["a"].calls["list_leases"] <= once_an_interval
    assert job.apis["a"].calls["read_lease"] == 0
    for name in "bcd":
        calls = job.apis[name].calls
        assert calls["list_leases"] == 0
        assert 0 < calls["get_config_map"] <= once_an_interval
        assert 0 < calls["read_lease"] <= once_an_interval


# -- a burst of joins: one list per quiet window, not one per joiner ----------------------------


class ChangeWatch:
    """A `StoreWatch` that wakes as `KubernetesWatch` does: a Lease came or went, or the world
    ConfigMap was written (a renewal is no change)."""

    def __init__(self, api: FakeApi, members: bool) -> None:
        self.api, self.members = api, members
        self.seen = self.state()

    def state(self) -> tuple[frozenset[str], str]:
        world = self.api.config_maps.get(WORLD)
        leases = frozenset(self.api.leases) if self.members else frozenset()
        return leases, world[1] if world else ""

    def wait(self, timeout: float) -> bool:
        now = self.state()
        woke, self.seen = now != self.seen, now
        return woke

    def close(self) -> None:
        pass


def wake(job: Job) -> None:
    """The coordinator's watch reports what changed since the last round."""
    job.agents["a"].wait_for_change(0)


def watched_job() -> Job:
    """a (the coordinator), b and c, watching, in a world steady for a while."""
    job = Job()
    for name in "abc":
        job.add(name, job.store(name, lambda members: ChangeWatch(job.api, members)))
    job.run(4, each=lambda: wake(job))
    assert job.ids() == ["a", "b", "c"] and job.coordinators() == ["a"]
    return job


def burst(job: Job, names: str, seconds: float) -> list[tuple[float, int, int]]:
    """`names` join one a tick, then `seconds` more pass; the worlds written (time, size, the
    coordinator's Lease lists by then)."""
    joining = list(names)
    worlds: list[tuple[float, int, int]] = []

    def each() -> None:
        if joining:
            job.add(joining.pop(0))
        job.agents["a"].wait_for_change(0)
        record = World.from_json(job.api.config_maps[WORLD][0]["world"])
        if not worlds or worlds[-1][1] != record.size:
            worlds.append((job.clock.now, record.size, job.apis["a"].calls["list_leases"]))

    job.run(len(names) * TICK + seconds, each=each)
    return worlds


def test_a_burst_of_joins_is_listed_once_per_quiet_window_and_written_once() -> None:
    job = watched_job()
    job.apis["a"].calls.clear()
    start = job.clock.now
    worlds = burst(job, "defghijk", seconds=3)  # 8 joins in 1.6 s: shorter than max_debounce
    assert worlds[0][1] == 3
    assert [size for _, size, _ in worlds[1:]] == [11], "one world for the whole burst"
    last_join = start + 8 * TICK
    written, _, lists = worlds[1]
    assert written - last_join <= SETTINGS.debounce + 2 * TICK  # the quiet window, not more
    # Until it was written: one list when the burst began, one when its window ended, and
    # the one each heartbeat interval brings; not one per joiner (8, each waking it).
    assert lists <= 2 + math.ceil((written - start) / SETTINGS.heartbeat_interval)
    assert lists < 8
    assert job.apis["a"].calls["replace_config_map"] == 1


def test_leases_created_together_are_one_change_listed_twice() -> None:
    """A scale-up's 5 Leases 10 ms apart to a steady world: one change (a lone one's quiet,
    5 % of the debounce, from the last of them), one world, a list at its start and end."""
    job = watched_job()
    job.run(SETTINGS.debounce)  # steady for a debounce
    a = job.agents["a"]
    job.apis["a"].calls.clear()
    step = 0.01
    for name in "defgh":
        job.add(name)
        job.clock.now += step
        a.wait_for_change(0)
        a.tick()
    last = job.clock.now
    while job.ids() == ["a", "b", "c"] and job.clock.now - last < 2 * SETTINGS.debounce:
        job.clock.now += step
        a.wait_for_change(0)
        a.tick()
    assert job.ids() == ["a", "b", "c", "d", "e", "f", "g", "h"]
    assert job.clock.now - last <= SETTINGS.debounce * 0.05 + step
    assert job.apis["a"].calls["list_leases"] == 2
    assert job.apis["a"].calls["replace_config_map"] == 1


def test_a_burst_longer_than_max_debounce_is_written_within_it() -> None:
    job = watched_job()
    start = job.clock.now
    worlds = burst(job, "defghijklmnopqrstuvwxyz", seconds=3)  # 23 joins in 4.6 s
    first_join, first = start + TICK, worlds[1][0]
    assert first - first_join <= SETTINGS.max_debounce + 2 * TICK  # the bound holds mid-burst
    assert 3 < worlds[1][1] < 26
    assert worlds[-1][1] == 26


def test_a_world_written_meanwhile_is_read_before_the_burst_is_written() -> None:
    """A member leaves (and writes its world) inside the coordinator's coalesced window: the
    coordinator's write is a compare-and-swap on a fresh read, so the leave is kept."""
    job = watched_job()
    job.add("d")
    job.run(TICK, each=lambda: wake(job))
    job.add("e")
    job.run(TICK, each=lambda: wake(job))
    job.agents.pop("c").leave()  # its own world: a, b (and whoever it saw joining)
    left = World.from_json(job.api.config_maps[WORLD][0]["world"]).generation
    job.run(3, each=lambda: wake(job))
    assert job.ids() == ["a", "b", "d", "e"]
    assert World.from_json(job.api.config_maps[WORLD][0]["world"]).generation >= left


def test_long_expired_leases_are_removed_once_a_list() -> None:
    job = watched_job()
    job.agents.pop("c")  # silent from now on
    deleted: list[str] = []
    original = job.api.delete_lease

    def delete(name: str) -> None:
        deleted.append(name)
        original(name)

    job.api.delete_lease = delete  # type: ignore[method-assign]
    job.run(3 * SETTINGS.ttl + 2, each=lambda: wake(job))
    assert job.ids() == ["a", "b"]
    assert len(deleted) == 1 and "c" in deleted[0]
    assert not any("c" in name for name in job.api.leases)
