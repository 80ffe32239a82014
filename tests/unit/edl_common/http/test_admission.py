"""Who keeps a connection when the room is full: the admission table, on a manual clock."""

from __future__ import annotations

from edl_common.http.admission import Admission, AdmissionLimits, Phase, Tracked
from edl_common.http.memory import MemoryBudget


class Table:
    def __init__(self, limits: AdmissionLimits) -> None:
        self.now = 0.0
        self.closed: list[str] = []
        self.admission = Admission(limits, lambda: self.now)

    def open(
        self, name: str, peer: str = "10.0.0.1", phase: Phase = Phase.WAITING, after: float = 1.0
    ) -> Tracked | None:
        self.now += after
        return self.admission.accept(peer, phase, lambda: self.closed.append(name))


def test_a_newcomer_closes_the_connection_idle_longest_never_one_being_served() -> None:
    t = Table(AdmissionLimits(max_connections=3))
    busy = t.open("busy")
    reading = t.open("reading")
    idle = t.open("idle")
    assert busy and reading and idle
    t.admission.enter(busy, Phase.SERVING)
    t.admission.enter(reading, Phase.READING)
    t.admission.enter(idle, Phase.WAITING)  # idle since after `reading` started reading
    assert t.open("new-1", after=2.0) is not None
    assert t.closed == ["idle"]  # idle (past the grace) before slow, whatever the age
    assert t.open("new-2", after=0.1) is not None
    assert t.closed == ["idle", "reading"]  # new-1 just connected: not idle yet
    new_3 = t.open("new-3", after=0.1)  # now only fresh ones: the oldest; never `busy`
    assert new_3 is not None and t.closed == ["idle", "reading", "new-1"]
    assert t.admission.open == 3 and t.admission.evicted == 3


def test_with_everyone_being_served_a_newcomer_is_refused() -> None:
    t = Table(AdmissionLimits(max_connections=2))
    for name in ("a", "b"):
        conn = t.open(name)
        assert conn is not None
        t.admission.enter(conn, Phase.SERVING)
    assert t.open("c") is None
    assert t.closed == [] and t.admission.refused == 1 and t.admission.open == 2


def test_unprivileged_connections_never_take_the_reserved_room() -> None:
    t = Table(AdmissionLimits(max_connections=4, reserved=2))
    strangers = [t.open(f"stranger-{i}", phase=Phase.HANDSHAKE) for i in range(4)]
    assert all(strangers)  # handshaking: not known yet, may sit in the whole room
    for s in strangers[:2]:
        assert s is not None and t.admission.classify(s, privileged=False)
        t.admission.enter(s, Phase.SERVING)
    third = strangers[2]
    assert third is not None and not t.admission.classify(third, privileged=False)
    assert t.admission.refused == 1  # no unprivileged room left and nobody idle to close
    proxy = strangers[3]
    assert proxy is not None and t.admission.classify(proxy, privileged=True)
    # a privileged connection arriving at the cap closes a stranger still handshaking
    another = t.open("stranger-4", phase=Phase.HANDSHAKE)
    assert another is not None and t.closed == []  # 3 open: room without eviction
    late_proxy = t.open("proxy-2", phase=Phase.HANDSHAKE)
    assert late_proxy is not None and t.closed == ["stranger-4"]
    assert t.admission.classify(late_proxy, privileged=True)


def test_privileged_connections_are_never_evicted_by_strangers() -> None:
    t = Table(AdmissionLimits(max_connections=2, reserved=1))
    proxy = t.open("proxy", phase=Phase.HANDSHAKE)
    assert proxy is not None and t.admission.classify(proxy, privileged=True)
    t.admission.enter(proxy, Phase.WAITING)  # idle keep-alive between HPA syncs
    first = t.open("stranger-1")
    assert first is not None
    second = t.open("stranger-2")  # evicts the idle stranger, not the idle proxy
    assert second is not None and t.closed == ["stranger-1"]


def test_one_peer_may_hold_only_its_share_and_evicts_its_own() -> None:
    t = Table(AdmissionLimits(max_connections=10, max_per_peer=2))
    a1, a2 = t.open("a1", "10.0.0.1"), t.open("a2", "10.0.0.1")
    b1 = t.open("b1", "10.0.0.2")
    assert a1 and a2 and b1
    assert t.open("a3", "10.0.0.1") is not None
    assert t.closed == ["a1"]  # its own oldest, not the other peer's b1
    assert t.admission.unprivileged("10.0.0.1") == 2
    assert t.admission.unprivileged("10.0.0.2") == 1


def test_a_scrape_that_just_sent_its_head_is_the_last_young_one_to_go() -> None:
    t = Table(AdmissionLimits(max_connections=3))
    scrape = t.open("scrape", after=0.1)
    assert scrape is not None
    t.admission.enter(scrape, Phase.READING)
    assert t.open("churn-1", after=0.1) and t.open("churn-2", after=0.1)
    assert t.open("churn-3", after=0.1) is not None  # everyone young: waiting ones go first
    assert t.closed == ["churn-1"]
    t.now += 5.0  # now the scrape has been reading for 5 s: slow, it goes before young ones
    assert t.open("churn-4", after=0.1) is not None
    assert t.closed == ["churn-1", "churn-2"]  # churn-2 idle past the grace: idle goes first
    assert t.open("churn-5", after=0.1) is not None
    assert t.closed == ["churn-1", "churn-2", "churn-3"]
    assert t.open("churn-6", after=0.1) is not None
    assert t.closed[-1] == "scrape"  # slow reader before the young churn-4 and churn-5


def test_a_connection_waiting_its_turn_is_closed_like_an_idle_one() -> None:
    t = Table(AdmissionLimits(max_connections=2))
    flood = t.open("pipelining")
    reader = t.open("reading")
    assert flood and reader
    t.admission.enter(reader, Phase.READING)
    t.admission.enter(flood, Phase.QUEUED)  # its next request waits for a turn
    t.now += 2.0
    assert t.open("newcomer") is not None
    assert t.closed == ["pipelining"]  # before the slow reader, as an idle one would


class Resident:
    """A process's resident memory, set by the test."""

    def __init__(self, rss: int) -> None:
        self.rss = rss
        self.reclaimed = 0

    def __call__(self) -> int:
        return self.rss

    def reclaim(self) -> None:
        self.reclaimed += 1


def memory_table(limit: int, rss: Resident, max_connections: int = 100) -> Table:
    t = Table(AdmissionLimits(max_connections=max_connections))
    t.admission = Admission(
        t.admission.limits,
        lambda: t.now,
        MemoryBudget(limit, admit_ratio=0.5, rss=rss, reclaim=rss.reclaim, clock=lambda: t.now),
    )
    return t


def test_past_the_memory_high_water_a_newcomer_takes_a_strangers_place_or_is_refused() -> None:
    rss = Resident(300)
    t = memory_table(1000, rss)  # high water 500: 200 left for connections of 50 bytes

    def accept(name: str) -> Tracked | None:
        t.now += 0.1
        return t.admission.accept("10.0.0.1", Phase.WAITING, lambda: t.closed.append(name), 50)

    opened = [accept(f"c{i}") for i in range(4)]
    assert all(opened) and t.admission.charged == 200
    rss.rss = 500  # what they hold shows in the next reading
    t.now += 2.0  # they are idle now
    fifth = accept("fifth")  # does not fit: it takes the place of the one idle longest
    assert fifth is not None and t.closed == ["c0"] and t.admission.charged == 200
    for conn in [*opened[1:], fifth]:
        assert conn is not None
        t.admission.enter(conn, Phase.SERVING)  # nobody left to close
    assert accept("sixth") is None
    assert t.admission.short_of_memory == 1 and t.admission.refused == 1
    assert rss.reclaimed == 1  # freed memory was asked back before refusing


def test_far_past_the_high_water_each_newcomer_closes_one_stranger_not_all() -> None:
    rss = Resident(300)
    t = memory_table(1000, rss)
    strangers = [t.admission.accept("10.0.0.1", Phase.WAITING, lambda: None, 10) for _ in range(8)]
    assert all(strangers)
    rss.rss = 700  # the store grew: above the high water whatever connections hold
    t.now += 2.0
    for n in range(1, 4):  # each takes one stranger's place: the room stays as full
        assert t.admission.accept("10.0.0.2", Phase.WAITING, lambda: None, 10) is not None
        assert t.admission.evicted == n and t.admission.open == 8


def test_a_strangers_body_must_fit_a_privileged_ones_is_only_counted() -> None:
    rss = Resident(400)
    t = memory_table(1000, rss)
    stranger = t.admission.accept("10.0.0.1", Phase.HANDSHAKE, lambda: None, 50)
    proxy = t.admission.accept("10.0.0.2", Phase.HANDSHAKE, lambda: None, 50)
    assert stranger and proxy
    assert t.admission.classify(stranger, privileged=False)
    assert t.admission.classify(proxy, privileged=True)
    assert not t.admission.charge_body(stranger, 65536)
    assert t.admission.charge_body(stranger, 0)
    assert t.admission.charge_body(proxy, 65536) and t.admission.charged == 100 + 65536
    t.admission.discharge(proxy, 65536)
    t.admission.leave(proxy)
    t.admission.leave(stranger)
    assert t.admission.charged == 0


def test_past_the_swap_line_no_newcomer_comes_in_and_no_one_is_closed() -> None:
    rss = Resident(300)
    t = memory_table(1000, rss)  # high water 500, swap line 750
    strangers = [t.admission.accept("10.0.0.1", Phase.WAITING, lambda: None, 10) for _ in range(4)]
    assert all(strangers)
    rss.rss = 800
    t.now += 2.0
    assert t.admission.accept("10.0.0.2", Phase.WAITING, lambda: None, 10) is None
    assert t.admission.evicted == 0 and t.admission.open == 4
    assert t.admission.short_of_memory == 1
