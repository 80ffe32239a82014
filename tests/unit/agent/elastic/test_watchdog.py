"""The step-progress watchdog and the rescale record: pure values, judged without a clock."""

from __future__ import annotations

import pytest

from agent.elastic.pause import OpenRescale, change
from agent.elastic.watchdog import Progress, StallWatchdog
from agent.elastic.world import Member, World
from agent.protocol.control import Timings


def test_a_stopped_trainer_is_frozen_after_the_bound_whatever_it_was_doing() -> None:
    dog = StallWatchdog(stall_seconds=10, flush_seconds=1)
    dog.observe(Progress(updated=100.0, last_step=99.5, steps=50))
    dog.observe_state(stopped=True, now=101.0)
    assert dog.frozen_for(110.0, in_training_loop=False) == 0.0
    assert dog.frozen_for(111.5, in_training_loop=False) == pytest.approx(10.5)
    dog.observe_state(stopped=False, now=112.0)  # SIGCONT: it runs again
    assert dog.frozen_for(112.0, in_training_loop=True) == 0.0
    dog.observe_state(stopped=True, now=113.0)
    dog.reset()  # a new incarnation forgets the old one
    assert dog.frozen_for(200.0, in_training_loop=True) == 0.0


def test_a_stale_report_counts_only_in_the_training_loop_and_after_three_bounds() -> None:
    dog = StallWatchdog(stall_seconds=10, flush_seconds=1)
    assert dog.frozen_for(1000.0, in_training_loop=True) == 0.0  # no report yet: no verdict
    dog.observe(Progress(updated=100.0, last_step=100.0, steps=5))
    dog.observe(None)  # an unreadable read keeps the last good one
    assert dog.frozen_for(125.0, in_training_loop=True) == 0.0
    # a framework may hold the interpreter lock while it forms a group: not in the loop
    assert dog.frozen_for(140.0, in_training_loop=False) == 0.0
    assert dog.frozen_for(131.0, in_training_loop=True) == pytest.approx(31.0)
    assert StallWatchdog(0, 1).frozen_for(1e9, in_training_loop=True) == 0.0  # disabled
    with pytest.raises(ValueError, match="three report flushes"):
        StallWatchdog(stall_seconds=2, flush_seconds=1)


def test_a_pause_starts_at_the_last_step_when_the_steps_had_stopped_before_the_decision() -> None:
    dog = StallWatchdog(stall_seconds=10, flush_seconds=1)
    assert dog.stood_still_since(50.0) == 50.0  # nothing known
    dog.observe(Progress(updated=49.8, last_step=49.7, steps=10, mean_step=0.1))
    assert dog.stood_still_since(50.0) == 50.0  # stepping until the decision (report lags)
    dog.observe(Progress(updated=79.9, last_step=60.0, steps=11, mean_step=0.1))
    assert dog.stood_still_since(80.0) == 60.0  # hung since its last step
    dog.observe(Progress(updated=79.9, last_step=70.0, steps=11, mean_step=5.0))
    assert dog.stood_still_since(80.0) == 80.0  # a 5 s step in flight is still training


A = Member(1.0, "a", "1", "h", (1, 2))
B = Member(2.0, "b", "2", "h", (3, 4))
C = Member(3.0, "c", "3", "h", (5, 6))


def test_the_change_between_worlds_names_members() -> None:
    assert change(World(1, (A, B)), World(2, (A, C))) == "+c -b"
    assert change(World(1, (A,)), World(2, (A,))) == "same members"
    assert change(None, World(1, (A,))) == "+a"


def test_an_open_rescale_follows_its_detours_and_closes_with_the_whole_pause() -> None:
    r = OpenRescale(from_generation=4, generation=5, stalled=90.0, noticed=99.0, decided=100.0)
    r.reasons.append("-b")
    r.supersede(6, "never joined generation 5")
    r.supersede(5, "-b")  # an older target never moves it back; a known reason is kept once
    r.restarted, r.drained, r.spawned = True, 101.0, 102.0
    t = Timings(started=102.5, imported=104.0, master=104.2, initialised=105.0, first_step=106.0)
    record = r.close(7, t)
    assert record.generation == 7 and record.from_generation == 4
    assert record.pause == pytest.approx(16.0)  # from the last step (90), not the decision
    assert record.path == "restart" and record.reasons == ("-b", "never joined generation 5")
    assert record.phases["detect"] == pytest.approx(10.0)
    assert record.phases["drain"] == pytest.approx(1.0)
    assert record.phases["init"] == pytest.approx(2.0 + 0.8)
    assert record.phases["restore"] == pytest.approx(1.0)
    line = record.describe()
    assert line.startswith("rescale to generation 7 (from 4: -b; never joined generation 5; ")
    assert "restart): pause 16.00 s (detect 10.00" in line


def test_an_in_process_rescale_pauses_from_the_decision() -> None:
    r = OpenRescale(4, 5, stalled=100.0, noticed=99.5, decided=100.0, reasons=["+c"])
    t = Timings(started=100.1, imported=100.1, master=100.2, initialised=100.5, first_step=100.6)
    record = r.close(5, t)
    assert record.path == "in-process" and record.pause == pytest.approx(0.6)
    assert record.phases["drain"] == pytest.approx(0.1)
    assert record.phases["rendezvous"] == pytest.approx(0.1)


def test_a_world_stepped_in_on_the_way_to_a_newer_one_splits_the_rescale_in_two() -> None:
    r = OpenRescale(3, 5, stalled=90.0, noticed=90.0, decided=90.5, reasons=["lost a peer, -b"])
    r.restarted, r.spawned = True, 91.0
    r.supersede(6, "+e", decided=98.0)  # decided while it was still forming generation 5
    r.supersede(7, "-e", decided=99.0)
    five = Timings(started=91.0, imported=96.0, master=97.0, initialised=98.5, first_step=99.5)
    record, rest = r.split(5, five)
    assert record.generation == 5 and record.from_generation == 3
    assert record.reasons == ("lost a peer, -b",) and record.path == "restart"
    assert record.pause == pytest.approx(9.5)
    # it stepped once (decided 6 before that step ended) and stops: the next pause starts there
    assert (rest.from_generation, rest.generation, rest.stalled) == (5, 7, 99.5)
    assert rest.reasons == ["+e", "-e"] and not rest.restarted
    seven = Timings(started=99.6, imported=99.6, master=99.7, initialised=99.8, first_step=100.0)
    last = rest.close(7, seven)
    assert last.from_generation == 5 and last.path == "in-process"
    assert last.pause == pytest.approx(0.5)
    # the same time without training as one record from 3 to 7, now in the two it was
    assert record.pause + last.pause == pytest.approx(r.close(7, seven).pause)


def test_a_split_after_the_newer_decision_pauses_from_that_decision() -> None:
    r = OpenRescale(3, 4, stalled=90.0, noticed=90.0, decided=90.0, reasons=["+d"])
    r.restarted, r.spawned = True, 90.5
    r.supersede(5, "-d", decided=95.0)  # it stepped in 4 from 92 on; its agent had not read it
    r.drained = 95.5  # the drain to 5 (it exits to restart there) belongs to the next pause
    t = Timings(started=90.6, imported=91.0, master=91.2, initialised=91.5, first_step=92.0)
    record, rest = r.split(4, t)
    assert record.pause == pytest.approx(2.0) and rest.stalled == 95.0
    assert record.phases["drain"] == pytest.approx(0.5) and sum(record.phases.values()) <= 2.0
    assert rest.reasons == ["-d"] and rest.heads == {} and rest.drained == 95.5


def test_a_pause_starts_where_the_trainer_says_it_stood_still_before_the_decision() -> None:
    # a peer's SIGTERM stopped every rank at one boundary (99.0); our agent decided at 100.2
    r = OpenRescale(4, 5, stalled=100.2, noticed=100.0, decided=100.2, reasons=["-c"])
    t = Timings(started=100.3, imported=100.3, master=100.4, initialised=100.6, first_step=100.8)
    record = r.close(5, t, stopped=99.0)
    assert record.pause == pytest.approx(1.8)  # not 0.6: training stood still since 99.0
    assert record.phases["detect"] == pytest.approx(1.2)
    assert sum(record.phases.values()) == pytest.approx(record.pause)


def test_a_pause_starts_where_the_trainer_stopped_after_the_decision() -> None:
    # a join: the decision came at 100.0, the trainer stepped on to its boundary at 100.15
    r = OpenRescale(4, 5, stalled=100.0, noticed=99.5, decided=100.0, reasons=["+c"])
    t = Timings(started=100.2, imported=100.2, master=100.3, initialised=100.5, first_step=100.6)
    assert r.close(5, t, stopped=100.15).pause == pytest.approx(0.45)


def test_the_tracker_takes_the_stop_from_the_world_the_rescale_left() -> None:
    from agent.elastic.pause import RescaleTracker

    tracker = RescaleTracker()
    tracker.trained = True
    tracker.begin(4, 5, "-c", decided=100.2, stalled=100.2, noticed=100.0)
    left = Timings(first_step=50.0, stopped=99.0)
    t = Timings(started=100.3, imported=100.3, master=100.4, initialised=100.6, first_step=100.8)
    record = tracker.stepped(5, t, {4: left, 5: t}.get)
    assert record is not None and record.pause == pytest.approx(1.8)
    tracker.begin(5, 6, "+d", decided=200.0, stalled=200.0, noticed=199.0)
    later = Timings(started=200.1, imported=200.1, first_step=200.5)
    record = tracker.stepped(6, later)  # no report of where it stopped: from the decision
    assert record is not None and record.pause == pytest.approx(0.5)


def test_a_first_step_that_ends_as_the_next_world_is_decided_still_gets_its_record() -> None:
    from agent.elastic.pause import RescaleTracker

    # our agent decided generation 2 before it read the end of our trainer's first step in 1
    tracker = RescaleTracker()
    tracker.begin(1, 2, "+b", decided=100.0, stalled=100.0, noticed=99.9)
    one = Timings(started=99.0, first_step=100.05, stopped=100.05)
    two = Timings(started=100.2, imported=100.2, master=100.3, initialised=100.5, first_step=100.7)
    record = tracker.stepped(2, two, {1: one, 2: two}.get)
    assert record is not None and record.pause == pytest.approx(0.65)
    # a joiner handed a newer world before its first step anywhere: no rescale of its own
    joiner = RescaleTracker()
    joiner.begin(1, 2, "+c", decided=100.0, stalled=100.0, noticed=99.9)
    assert joiner.stepped(2, two, {1: Timings(started=99.0), 2: two}.get) is None
    joiner.begin(2, 3, "-c", decided=200.0, stalled=200.0, noticed=199.9)  # now it is one
    three = Timings(started=200.1, imported=200.1, first_step=200.4)
    record = joiner.stepped(3, three, {2: two, 3: three}.get)
    assert record is not None and record.pause == pytest.approx(0.4)
