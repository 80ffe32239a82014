"""How the elastic supervisor lives through world changes that take detours (issue 19).

A scripted fake trainer follows the control-channel protocol the way `ElasticTrainer` does
(it takes a world handed over before it joined one, stops at a boundary when asked, exits
75/76/143/137); peers are heartbeats written straight into a real `LocalStore`.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.elastic.local_store import LocalStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.supervisor import ElasticSettings, ElasticSupervisor
from agent.elastic.watchdog import StallWatchdog
from agent.elastic.world import Member, World
from agent.process.rescales import RescaleLog
from agent.process.trainer_supervisor import TrainerExit
from agent.protocol.control import RESCALE_EXIT, ControlChannel, Timings
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from tests.support.waiting import wait_for

ME = Member(joined=1.0, id="a", incarnation="x", host="127.0.0.1", ports=(7000, 7001))
PEER = Member(joined=2.0, id="b", incarnation="y", host="127.0.0.1", ports=(7002, 7003))


class ScriptedTrainer:
    """A `Trainer` (the process as the supervisor sees it), driven by simple rules.

    `joins`: whether it joins (initialises and steps in) the worlds it is given; a trainer
    that does not is one still importing, or meeting peers that never come.
    """

    def __init__(self, control: Path) -> None:
        self.channel = ControlChannel(control)
        self.framework = frameworks.get("paddle")
        self.report_path: Path | None = None
        self.pid: int | None = None
        self.joins = True
        self.deaf = False
        """Reads no control channel (still importing): only signals reach it."""
        self.forms_forever = False
        """Once given a world, it enters its framework's formation and never comes out."""
        self.in_process = True
        self.starts: list[TrainerWorld] = []
        self.handed: list[int] = []
        self.signals: list[int] = []
        self.generation = -1
        self.running = False
        self.status: int | None = None
        self.last_exit: TrainerExit | None = None
        self.done_after: int | None = None
        """Exit 0 (the job is done) after stepping in this generation."""
        self.steps_before_newer = False
        """Handed a newer world before it stepped in its own (its group formation was past
        the point of no return), it steps once in its own first, then moves on."""

    def start(self, world: TrainerWorld) -> int:
        self.starts.append(world)
        self.running, self.status, self.generation = True, None, world.generation
        self.last_exit, self.deaf = None, False
        now = time.time()
        self._report(Timings(started=now, imported=now, reinit=self._mode()))
        return 4242

    def _mode(self) -> str:
        return "in-process" if self.in_process else "process"

    def update_world(self, world: TrainerWorld) -> None:
        self.handed.append(world.generation)

    def log_tail(self) -> tuple[str, ...]:
        return ("Traceback (most recent call last):", "RuntimeError: fake trainer crash")

    def _report(self, timings: Timings) -> None:
        self.channel.report(self.generation, timings)

    def _join(self) -> None:
        now = time.time()
        t = Timings(started=now, imported=now, master=now, initialised=now, first_step=now)
        self._report(Timings(**{**t.__dict__, "reinit": self._mode()}))

    def wait(self, timeout: float | None = None) -> TrainerExit | None:
        time.sleep(min(timeout or 0.0, 0.01))  # a fake of a blocking wait: it waits, briefly
        if not self.running:
            return self.last_exit  # as TrainerSupervisor: the exit stays readable
        if self.status is not None:
            self.running = False
            self.last_exit = TrainerExit(self.status, 1.0, len(self.starts))
            return self.last_exit
        if self.deaf:
            return None
        if self.forms_forever and self.generation > 0 and not self._stepping():
            now = time.time()  # met every rank, now inside the framework's group formation
            self._report(Timings(started=now, imported=now, master=now, reinit=self._mode()))
            self.deaf = True  # blocked in C++: reads nothing until it is killed
            return None
        handed = self.channel.next_world()
        newer = handed is not None and handed.generation > self.generation
        stepping = self._stepping()
        if newer and not stepping and self.steps_before_newer:
            self.steps_before_newer = False
            self._join()
        elif newer and (not stepping or self.channel.drain_requested(self.generation)):
            assert handed is not None
            if handed.world is None:
                self.status = RESCALE_EXIT  # told to leave at the boundary
            elif stepping and not self.in_process:
                self.status = RESCALE_EXIT  # stops at the boundary, restarted in the new world
            else:
                self.generation = handed.generation  # takes the world it was handed
                self._report(Timings(started=time.time(), reinit=self._mode()))
        elif self.joins and not self._stepping() and self.generation > 0:
            self._join()
        if self.done_after is not None and self._stepping():
            if self.generation >= self.done_after:
                self._report(Timings(first_step=time.time(), finished=time.time()))
                self.status = 0
        return None

    def _stepping(self) -> bool:
        t = self.channel.timings(self.generation)
        return t is not None and t.first_step is not None

    def forward_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if self.running and self.status is None:
            self.status = 128 + sig

    def kill(self) -> None:
        self.forward_signal(signal.SIGKILL)


def make(
    tmp_path: Path, watchdog: StallWatchdog | None = None, **settings: float
) -> tuple[ElasticSupervisor, ScriptedTrainer, LocalStore, RescaleLog]:
    store = LocalStore.create(tmp_path / "store")
    membership = Membership(store, ME, MembershipSettings(debounce=0.1, poll_interval=0.02))
    control = tmp_path / "control"
    control.mkdir()
    fake = ScriptedTrainer(control)
    rescales = RescaleLog()
    options = {"backend": "gloo", "init_timeout": 30.0, "on_finished": "exit", **settings}
    sup = ElasticSupervisor(
        membership,
        fake,
        control,
        rescales,
        ElasticSettings(**options),  # type: ignore[arg-type]
        job="digits",
        watchdog=watchdog,
    )
    return sup, fake, store, rescales


def run_in_thread(sup: ElasticSupervisor, seconds: float = 30) -> dict[str, int]:
    out: dict[str, int] = {}
    thread = threading.Thread(target=lambda: out.update(status=sup.run(max_seconds=seconds)))
    thread.daemon = True
    thread.start()
    out["thread"] = 0
    sup._test_thread = thread  # type: ignore[attr-defined]
    return out


def until(what: str, check: Callable[[], object], timeout: float = 60) -> None:
    wait_for(check, timeout_s=timeout, what=what, interval_s=0.02)


def world(store: LocalStore) -> World:
    text = store.read_world().text
    assert text is not None
    return World.from_json(text)


def finish(sup: ElasticSupervisor, out: dict[str, int]) -> int:
    sup._test_thread.join(300)  # type: ignore[attr-defined]
    return out["status"]


@pytest.mark.slow
def test_a_trainer_that_has_not_joined_is_handed_the_new_world_not_killed(
    tmp_path: Path,
) -> None:
    sup, fake, store, _ = make(tmp_path)
    fake.joins = False  # it is still starting (importing, or meeting its peers)
    out = run_in_thread(sup)
    until("generation 1", lambda: fake.handed == [1])
    store.beat(PEER)
    until("generation 2 handed over", lambda: 2 in fake.handed)
    assert fake.signals == [] and len(fake.starts) == 1  # the same (warm) process throughout
    fake.joins = True
    until("stepping in 2", lambda: fake.generation == 2 and fake._stepping())
    sup.request_stop(signal.SIGTERM)
    assert finish(sup, out) == 0


@pytest.mark.slow
def test_every_rescale_is_recorded_even_when_the_trainer_restarts_in_a_newer_world(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup, fake, store, rescales = make(tmp_path)
    fake.in_process = False
    out = run_in_thread(sup)
    with caplog.at_level(logging.INFO, logger="agent.elastic.supervisor"):
        until("training in 1", lambda: fake.generation == 1 and fake._stepping())
        fake.joins = False  # the restarted process will not join generation 2 in time
        store.beat(PEER)
        until("restarted in 2", lambda: len(fake.starts) == 2 and fake.generation == 2)
        store.remove(PEER)  # 2 never forms: the peer leaves again
        until("generation 3 handed over", lambda: 3 in fake.handed)
        fake.joins = True

        def logged() -> list[str]:
            return [m for r in caplog.records if (m := r.getMessage()).startswith("rescale to")]

        until("a record logged", logged)  # the agent thread logs it after counting it
    assert rescales.snapshot().rescales == 1
    (record,) = logged()
    assert record.startswith("rescale to generation 3 (from 1: +b; -b; restart): pause ")
    assert len(fake.starts) == 2  # the trainer was handed generation 3, not restarted again
    fake.done_after = 3
    assert finish(sup, out) == 0


@pytest.mark.slow
def test_a_world_the_trainer_stepped_in_after_a_newer_one_came_gets_its_own_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup, fake, store, rescales = make(tmp_path)
    out = run_in_thread(sup)
    with caplog.at_level(logging.INFO, logger="agent.elastic.supervisor"):
        until("training in 1", lambda: fake.generation == 1 and fake._stepping())
        fake.joins = False  # still forming generation 2 when generation 3 comes
        store.beat(PEER)
        until("in generation 2", lambda: fake.generation == 2)
        fake.steps_before_newer = True
        store.remove(PEER)
        until("generation 3 handed over", lambda: 3 in fake.handed)
        fake.joins = True

        def logged() -> list[str]:
            return [m for r in caplog.records if (m := r.getMessage()).startswith("rescale to")]

        until("two records logged", lambda: len(logged()) == 2)
    assert rescales.snapshot().rescales == 2
    two, three = logged()
    assert two.startswith("rescale to generation 2 (from 1: +b; in-process): pause ")
    assert three.startswith("rescale to generation 3 (from 2: -b; in-process): pause ")
    fake.done_after = 3
    assert finish(sup, out) == 0


@pytest.mark.slow
def test_a_stopped_trainer_is_excluded_within_the_stall_bound(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        sup, fake, store, _ = make(tmp_path, watchdog=StallWatchdog(0.5, flush_seconds=0.1))
        fake.pid = sleeper.pid
        out = run_in_thread(sup, seconds=3600)
        until("training in 1", lambda: fake.generation == 1 and fake._stepping())
        sleeper.send_signal(signal.SIGSTOP)
        assert finish(sup, out) == 1  # the run's time limit (an hour) is not what ended it
        assert signal.SIGKILL in fake.signals  # a stopped process only dies by SIGKILL
        assert store.heartbeats() == []  # it left the job: the others go on without it
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.slow
def test_sigterm_while_the_trainer_is_still_starting_is_a_clean_leave(tmp_path: Path) -> None:
    sup, fake, store, _ = make(tmp_path, drain_timeout=0.5)
    fake.joins = False
    out = run_in_thread(sup)
    until("generation 1", lambda: fake.handed == [1] and fake.generation == 1)
    fake.deaf = True  # e.g. a restarted process still importing its framework
    sup.request_stop(signal.SIGTERM)
    assert finish(sup, out) == 0  # 143 from a trainer that never joined: nothing was lost
    assert fake.signals == [signal.SIGTERM]
    assert store.heartbeats() == []


@pytest.mark.slow
def test_a_trainer_stuck_forming_a_world_that_lost_a_member_is_restarted_at_once(
    tmp_path: Path,
) -> None:
    sup, fake, store, _ = make(tmp_path, drain_timeout=3600)  # the hand-over bound: an hour
    out = run_in_thread(sup, seconds=3600)
    until("training in 1", lambda: fake.generation == 1 and fake._stepping())
    fake.in_process = True
    store.beat(PEER)
    until("generation 2", lambda: world(store).generation == 2)
    fake.forms_forever = True  # it drains and re-forms in-process, and the peer dies in it
    until("forming 2", lambda: fake.deaf)
    fake.forms_forever, fake.done_after = False, 3  # the next process joins, and finishes
    store.remove(PEER)
    until("restarted in 3", lambda: len(fake.starts) == 2, timeout=120)  # not after an hour
    assert fake.starts[-1].generation == 3 and fake.starts[-1].world_size == 1
    assert finish(sup, out) == 0
