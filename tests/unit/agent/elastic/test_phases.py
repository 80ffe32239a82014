"""The elastic agent's transition table, without processes: one round's state and observation
in, the next phase and the actions out (`agent.elastic.phases`), detours of issue 19 included."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace

import pytest

from agent.elastic.failures import TrainerFailure
from agent.elastic.phases import (
    Action,
    Fail,
    HandOver,
    HandTo,
    Join,
    Kill,
    Leave,
    Log,
    MarkDrained,
    Observation,
    OpenRescale,
    Phase,
    RecordFailure,
    RecordFinish,
    RequestGeneration,
    Rules,
    StartTrainer,
    State,
    Stepped,
    Stop,
    Terminate,
    Tick,
    TryFinish,
    begin,
    cannot_form,
    transition,
)
from agent.elastic.world import Member, World
from agent.process.trainer_supervisor import TrainerExit
from agent.protocol.control import PEER_LOST_EXIT, RESCALE_EXIT, Timings

ME = Member(joined=1.0, id="a", incarnation="x", host="127.0.0.1", ports=(7000, 7001))
PEER = Member(joined=2.0, id="b", incarnation="y", host="127.0.0.1", ports=(7002, 7003))
G1 = World(1, (ME,))
G2 = World(2, (ME, PEER))
G3 = World(3, (ME,))
RULES = Rules(key=ME.key, drain_timeout=30, init_timeout=120, regroup_timeout=20, max_resets=2)
T0 = 1000.0
"""Monotonic and wall clock of the round (the same number: the table reads easier)."""
FAILURE = TrainerFailure("b", 1, T0 - 5, ("ValueError: boom",))
FAILED = World(2, (PEER,)).with_failures((FAILURE, FAILURE), failed=True)
STEPPING = Timings(started=1.0, imported=1.0, master=1.0, initialised=1.0, first_step=2.0)


def ended(status: int) -> TrainerExit:
    return TrainerExit(status, 1.0, 1)


def running(world: World = G1, **fields: object) -> State:
    """A trainer that joined `world` and steps in it."""
    base = State(
        Phase.RUNNING,
        running=world,
        started_gen=world.generation,
        initialised=True,
        initialised_gen=world.generation,
        spawned_at=T0 - 10,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def seen(**fields: object) -> Observation:
    return replace(Observation(now=T0, wall=T0), **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    name: str
    state: State
    obs: Observation
    phase: Phase
    actions: tuple[type, ...]
    """The non-log actions, in order."""
    rules: Rules = RULES
    check: dict[str, object] = field(default_factory=dict)
    """State fields the next state must have."""


CASES = [
    # -- a warm start ----------------------------------------------------------------------
    Case(
        "warm trainer ready: join",
        State(Phase.STARTING, deadline=T0 + 1),
        seen(timings=Timings(imported=1.0)),
        Phase.STANDBY,
        (Join,),
    ),
    Case(
        "warm trainer crashed before joining: its failure is counted",
        State(Phase.STARTING, deadline=T0 + 1),
        seen(exit=ended(3)),
        Phase.CRASHED,
        (RecordFailure,),
        check={"status": 3},
    ),
    Case(
        "warm trainer not ready in time: stopped",
        State(Phase.STARTING, deadline=T0 - 1),
        seen(),
        Phase.STARTING,
        (Terminate,),
        check={"stop": Stop(T0, 5.0)},
    ),
    Case(
        "warm trainer stopped for lateness: the agent fails",
        State(Phase.STARTING, stop=Stop(T0 - 1, 5.0)),
        seen(exit=ended(143)),
        Phase.DONE,
        (),
        check={"status": 1},
    ),
    Case(
        "SIGTERM while the warm trainer starts: it is told to leave",
        State(Phase.STARTING, deadline=T0 + 1),
        seen(signal=signal.SIGTERM),
        Phase.LEAVING,
        (Leave, HandOver),
        check={"status": 0},
    ),
    Case(
        "stand-by given its first world: handed over, same process",
        State(Phase.STANDBY),
        seen(world=G1),
        Phase.RUNNING,
        (HandTo,),
        check={"running": G1, "handed": (1, T0), "initialised": False},
    ),
    Case(
        "stand-by sees a world without it: waits",
        State(Phase.STANDBY),
        seen(world=World(1, (PEER,))),
        Phase.STANDBY,
        (),
    ),
    Case(
        "stand-by reads a finished world: its trainer is told to go",
        State(Phase.STANDBY),
        seen(world=G1.finish(184)),
        Phase.FINISHING,
        (HandOver,),
        check={"finished_step": 184},
    ),
    Case(
        "stand-by's trainer crashed: leave, its failure is counted",
        State(Phase.STANDBY),
        seen(exit=ended(2)),
        Phase.CRASHED,
        (Leave, RecordFailure),
        check={"status": 2},
    ),
    # -- running -----------------------------------------------------------------------------
    Case(
        "stepping: the open rescale can close",
        running(),
        seen(world=G1, timings=STEPPING),
        Phase.RUNNING,
        (Stepped,),
    ),
    Case(
        "hand-over of a newer world to a trainer not yet in its world",
        running(G1, initialised=False, initialised_gen=0),
        seen(world=G2, timings=Timings(started=1.0, imported=1.0)),
        Phase.RUNNING,
        (OpenRescale, HandTo),
        check={"running": G2, "handed": (2, T0), "forming": (G1,)},
    ),
    Case(
        "newer world, in-process trainer: handed over, no restart",
        running(trainer_mode="in-process"),
        seen(world=G2, timings=replace(STEPPING, reinit="in-process")),
        Phase.RUNNING,
        (Stepped, OpenRescale, HandTo),
        check={"running": G2},
    ),
    Case(
        "newer world, restarting trainer: asked to stop at a boundary",
        running(),
        seen(world=G2, timings=STEPPING),
        Phase.DRAINING,
        (Stepped, OpenRescale, HandOver),
        check={"decided": T0, "deadline": T0 + 30},
    ),
    Case(
        "newer world without us: the trainer is told to leave at its boundary",
        running(G2),
        seen(world=World(3, (PEER,)), timings=STEPPING),
        Phase.DRAINING,
        (Stepped, HandOver),
    ),
    Case(
        "stall exclusion: a trainer standing still in its loop is killed, we leave",
        running(),
        seen(world=G1, timings=STEPPING, frozen_in_loop=31.0),
        Phase.LEAVING,
        (Stepped, Kill, Leave),
        check={"status": 1},
    ),
    Case(
        "a stale report outside the training loop is no stall",
        running(initialised=False),
        seen(world=G1, timings=Timings(started=1.0, master=1.0), frozen_in_loop=31.0),
        Phase.RUNNING,
        (),
    ),
    Case(
        "a stopped (SIGSTOP) process is a stall anywhere",
        running(initialised=False),
        seen(world=G1, timings=Timings(started=1.0), frozen_anyway=11.0),
        Phase.LEAVING,
        (Kill, Leave),
    ),
    Case(
        "restart of a trainer stuck forming a world that lost a member",
        running(G3, initialised=False, handed=(3, T0 - 1), forming=(G2,)),
        seen(world=G3, cannot_form=(2, "b")),
        Phase.RUNNING,
        (Terminate,),
        check={"stop": Stop(T0, 1.0), "handed": None, "stopped_by_us": True},
    ),
    Case(
        "a handed-over world not taken within the drain bound: stopped",
        running(G2, initialised=False, handed=(2, T0 - 31)),
        seen(world=G2),
        Phase.RUNNING,
        (Terminate,),
    ),
    Case(
        "the stuck trainer gone: restarted at once in the newest world",
        running(G3, initialised=False, initialised_gen=1, stopped_by_us=True, stop=Stop(T0, 1)),
        seen(world=G3, exit=ended(143)),
        Phase.RUNNING,
        (StartTrainer,),
        check={"running": G3, "started_gen": 3, "stopped_by_us": False},
    ),
    Case(
        "not formed within the init bound: stopped",
        running(initialised=False, spawned_at=T0 - 121),
        seen(world=G1),
        Phase.RUNNING,
        (Terminate,),
    ),
    Case(
        "asked to stop: SIGKILL after the grace",
        running(stop=Stop(T0 - 5, 5.0)),
        seen(world=G1),
        Phase.RUNNING,
        (Kill,),
        check={"stop": Stop(T0, 5.0, killed=True)},
    ),
    Case(
        "a crash is a scale-down: leave, its failure is counted",
        running(),
        seen(world=G1, exit=ended(137)),
        Phase.CRASHED,
        (Leave, RecordFailure),
        check={"status": 137, "running": None},
    ),
    Case(
        "a crash within the budget: end with the trainer's status (the container restarts)",
        State(Phase.CRASHED, status=137),
        seen(world=World(2, (PEER,), failures=(FAILURE,))),
        Phase.DONE,
        (),
        check={"status": 137},
    ),
    Case(
        "a crash over the budget: the job is failed, idle as a finished job",
        State(Phase.CRASHED, status=1),
        seen(world=FAILED),
        Phase.FINISHED,
        (RecordFinish,),
    ),
    Case(
        "a crash on the way out of a finished job costs nothing",
        running(),
        seen(world=G1.finish(9), exit=ended(1)),
        Phase.DONE,
        (Leave,),
        check={"status": 1},
    ),
    Case(
        "the collective broke (76) and no newer world: regroup",
        running(),
        seen(world=G1, exit=ended(PEER_LOST_EXIT)),
        Phase.REGROUPING,
        (),
        check={"broken": G1, "deadline": T0 + 20, "why": "lost a peer"},
    ),
    Case(
        "SIGTERM while the trainer is still starting: told to leave",
        running(G1, initialised=False, handed=(1, T0)),
        seen(world=G1, signal=signal.SIGTERM),
        Phase.LEAVING,
        (Leave, HandOver),
        check={"decided": T0, "status": None},
    ),
    Case(
        "the job finished elsewhere while ours runs: it gets the drain bound",
        running(),
        seen(world=G1.finish(184)),
        Phase.FINISHING,
        (),
        check={"deadline": T0 + 30},
    ),
    # -- draining --------------------------------------------------------------------------
    Case(
        "drained (75): restarted in the newer world",
        running(G1, phase=Phase.DRAINING, decided=T0 - 1, deadline=T0 + 29),
        seen(world=G2, exit=ended(RESCALE_EXIT), timings=STEPPING, rescale_target=2),
        Phase.RUNNING,
        (MarkDrained, Stepped, StartTrainer),
        check={"running": G2},
    ),
    Case(
        "killed (SIGKILL, not ours) on the way to a newer world: a crash, it leaves",
        running(G1, phase=Phase.DRAINING, decided=T0 - 1, deadline=T0 + 29),
        seen(world=G2, exit=ended(137), timings=STEPPING, rescale_target=2),
        Phase.CRASHED,
        (MarkDrained, Stepped, Leave, RecordFailure),
        check={"status": 137},
    ),
    Case(
        "killed by our own escalation on the way to a newer world: restarted there",
        running(
            G1,
            phase=Phase.DRAINING,
            decided=T0 - 31,
            stopped_by_us=True,
            stop=Stop(T0 - 5, 5.0, killed=True),
        ),
        seen(world=G2, exit=ended(137), rescale_target=2),
        Phase.RUNNING,
        (MarkDrained, StartTrainer),
        check={"running": G2},
    ),
    Case(
        "no boundary within the drain bound: stopped",
        running(G1, phase=Phase.DRAINING, decided=T0 - 30, deadline=T0),
        seen(world=G2),
        Phase.DRAINING,
        (Terminate,),
    ),
    Case(
        "a trainer that cannot drain any more is stopped before the bound",
        running(G1, phase=Phase.DRAINING, decided=T0 - 5, deadline=T0 + 25),
        seen(world=G2, cannot_drain=True),
        Phase.DRAINING,
        (Terminate,),
    ),
    # -- regrouping ------------------------------------------------------------------------
    Case(
        "regrouping: a newer world comes",
        State(Phase.REGROUPING, broken=G1, deadline=T0 + 5, why="lost a peer"),
        seen(world=G2),
        Phase.RUNNING,
        (OpenRescale, MarkDrained, StartTrainer),
    ),
    Case(
        "regrouping: none came, a generation of the same members is forced",
        State(Phase.REGROUPING, broken=G1, deadline=T0, started_gen=1),
        seen(world=G1),
        Phase.FORMING,
        (RequestGeneration, OpenRescale, MarkDrained),
        check={"resets": 1},
    ),
    Case(
        "regrouping: too many forced generations without a step",
        State(Phase.REGROUPING, broken=G1, deadline=T0, resets=2),
        seen(world=G1),
        Phase.DONE,
        (Fail,),
    ),
    Case(
        "forming: a world with us, newer than the last start",
        State(Phase.FORMING, started_gen=1),
        seen(world=G2),
        Phase.RUNNING,
        (StartTrainer,),
    ),
    Case(
        "forming: a paused world starts nothing",
        State(Phase.FORMING, started_gen=1),
        seen(world=World(2)),  # too few members: paused
        Phase.FORMING,
        (),
    ),
    # -- finishing and leaving ---------------------------------------------------------------
    Case(
        "finish: exit 0 records the step the trainer reported",
        running(),
        seen(world=G1, exit=ended(0), timings=replace(STEPPING, finished=3.0, finished_step=184)),
        Phase.FINISHED,
        (Stepped, RecordFinish),
        check={"finished_step": 184},
    ),
    Case(
        "finish in the world trained in, not the one handed last: that step is recorded",
        running(G2, handed=(2, T0 - 1), initialised=False),  # handed 2 during the last step
        seen(world=G2, exit=ended(0), finished_step=184),
        Phase.FINISHED,
        (RecordFinish,),
        check={"finished_step": 184},
    ),
    Case(
        "a peer's planned leave stopped the trainer (75): the pause starts at its last step",
        running(G2),
        seen(
            world=G2,
            exit=ended(RESCALE_EXIT),
            timings=replace(STEPPING, stopped=T0 - 1.5),
            stood_still=T0,
        ),
        Phase.REGROUPING,
        (Stepped,),
        check={"stalled": T0 - 1.5},
    ),
    Case(
        "finishing: the trainer did not end within the bound",
        running(phase=Phase.FINISHING, deadline=T0, finished_step=184),
        seen(world=G1.finish(184)),
        Phase.FINISHING,
        (Terminate,),
    ),
    Case(
        "finishing: stopped, the finish is recorded late",
        running(phase=Phase.FINISHING, stop=Stop(T0, 5.0), finished_step=184),
        seen(world=G1.finish(184), exit=ended(143)),
        Phase.FINISHED,
        (RecordFinish,),
    ),
    Case(
        "finished (exit): the mark is in the store",
        State(Phase.FINISHED, deadline=T0 + 10),
        seen(world=G1.finish(184)),
        Phase.DONE,
        (),
        rules=replace(RULES, exit_when_finished=True),
        check={"status": 0},
    ),
    Case(
        "failed (exit): a failed job ends its agents with status 1 (a failed Job)",
        State(Phase.FINISHED, deadline=T0 + 10),
        seen(world=FAILED),
        Phase.DONE,
        (),
        rules=replace(RULES, exit_when_finished=True),
        check={"status": 1},
    ),
    Case(
        "finished (exit): the store refused the mark, retried",
        State(Phase.FINISHED, deadline=T0 + 10),
        seen(world=G1),
        Phase.FINISHED,
        (TryFinish,),
        rules=replace(RULES, exit_when_finished=True),
    ),
    Case(
        "finished (idle): reads the store once a second",
        State(Phase.FINISHED, next_read=T0),
        seen(world=G1.finish(184)),
        Phase.FINISHED,
        (Tick,),
        check={"next_read": T0 + 1},
    ),
    Case(
        "finished (idle): SIGTERM exits 0",
        State(Phase.FINISHED, next_read=T0 + 1),
        seen(world=G1.finish(184), signal=signal.SIGTERM),
        Phase.DONE,
        (),
        check={"status": 0},
    ),
    Case(
        "leaving: a trainer that never joined its world stopped cleanly",
        running(phase=Phase.LEAVING, initialised=False, stop=Stop(T0, 5.0)),
        seen(exit=ended(143)),
        Phase.DONE,
        (),
        check={"status": 0},
    ),
    Case(
        "leaving: a trainer that had joined and crashed keeps its status",
        running(phase=Phase.LEAVING),
        seen(exit=ended(134)),
        Phase.DONE,
        (),
        check={"status": 134},
    ),
    Case(
        "leaving: a first step in the new world just before the leave ends its rescale",
        running(G2, phase=Phase.LEAVING, decided=T0 - 1, deadline=T0 + 29),
        seen(timings=STEPPING),
        Phase.LEAVING,
        (Stepped,),
    ),
    Case(
        "leaving: the trainer gone after its first step there, the rescale still ends",
        running(G2, phase=Phase.LEAVING, decided=T0 - 1, deadline=T0 + 29),
        seen(timings=STEPPING, exit=ended(RESCALE_EXIT)),
        Phase.DONE,
        (Stepped,),
    ),
    Case(
        "leaving: no step in the new world yet, nothing to end",
        running(G2, phase=Phase.LEAVING, decided=T0 - 1, deadline=T0 + 29),
        seen(timings=Timings(started=1.0, imported=1.0, master=1.0)),
        Phase.LEAVING,
        (),
    ),
    Case(
        "leaving: not gone within the drain bound, stopped",
        running(phase=Phase.LEAVING, decided=T0 - 30, deadline=T0),
        seen(),
        Phase.LEAVING,
        (Terminate,),
    ),
    Case(
        "excluded: gone after SIGKILL, the agent fails",
        State(Phase.LEAVING, status=1, stop=Stop(T0, 5.0, killed=True)),
        seen(exit=ended(137)),
        Phase.DONE,
        (),
        check={"status": 1},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_transition(case: Case) -> None:
    after, actions = transition(case.state, case.obs, case.rules)
    assert after.phase is case.phase
    assert tuple(type(a) for a in actions if not isinstance(a, Log)) == case.actions
    for name, value in case.check.items():
        assert getattr(after, name) == value, name


def test_every_phase_has_a_handler_and_a_paragraph_in_the_docstring() -> None:
    doc = Phase.__doc__ or ""
    for phase in Phase:
        assert f"\n    {phase.name} " in doc, phase
        after, _ = transition(State(phase, broken=G1, running=G1), seen(), RULES)
        assert isinstance(after, State)


def test_a_job_known_finished_starts_no_trainer() -> None:
    state, actions = begin(T0, RULES, finished=True, step=184, run_deadline=T0 + 60)
    assert state.phase is Phase.FINISHED and actions == [RecordFinish(184, late=True)]
    state, actions = begin(T0, RULES, finished=False, step=None, run_deadline=T0 + 60)
    assert state.phase is Phase.STARTING and state.deadline == T0 + 120


def test_a_trainer_started_warm_before_the_store_is_read_is_not_started_again() -> None:
    state, actions = begin(T0, RULES, finished=False, step=None, run_deadline=T0 + 60, warm=True)
    assert state.phase is Phase.STARTING and state.deadline == T0 + 120 and actions == []


def test_a_finished_job_tells_the_trainer_started_warm_to_go_then_idles() -> None:
    state, actions = begin(T0, RULES, finished=True, step=184, run_deadline=T0 + 60, warm=True)
    # Leave first: FINISHING renews the membership each round, and this agent never joined.
    assert actions == [Leave(), HandOver(None, 1)]
    assert state.phase is Phase.FINISHING and state.deadline == T0 + 30
    state, actions = transition(state, seen(exit=ended(RESCALE_EXIT)), RULES)
    assert state.phase is Phase.FINISHED and actions == [RecordFinish(184, late=True)]


def test_a_trainer_started_warm_into_a_finished_job_that_will_not_go_is_stopped() -> None:
    state, _ = begin(T0, RULES, finished=True, step=184, run_deadline=T0 + 60, warm=True)
    state, actions = transition(state, seen(now=T0 + 30), RULES)
    assert actions[-1] == Terminate() and state.phase is Phase.FINISHING
    state, actions = transition(state, seen(now=T0 + 31, exit=ended(143)), RULES)
    assert state.phase is Phase.FINISHED and actions == [RecordFinish(184, late=True)]


def test_the_hand_over_names_the_worlds() -> None:
    _, actions = transition(running(), seen(world=G2, timings=STEPPING), RULES)
    assert HandOver(G2, 2) in actions
    opened = [a for a in actions if isinstance(a, OpenRescale)]
    assert opened == [OpenRescale(G2, "+b", T0, 1, 0.0, None)]


def test_leaving_hands_over_past_the_newest_generation_known() -> None:
    _, actions = transition(running(G1), seen(world=G3, signal=signal.SIGINT), RULES)
    assert HandOver(None, 4) in actions
    logs = [a.message for a in actions if isinstance(a, Log)]
    assert logs == ["signal SIGINT: leaving the job"]


def test_cannot_form_names_who_left_a_world_being_formed() -> None:
    forming = {2: Timings(started=1.0, master=1.0)}
    assert cannot_form((G2,), forming, G3) == (2, "b")
    assert cannot_form((G1,), {1: Timings(master=1.0)}, G2) is None  # it only grew
    formed = {2: Timings(master=1.0, initialised=2.0)}
    assert cannot_form((G2,), formed, G3) is None


def test_actions_are_values() -> None:
    one: list[Action] = [HandTo(G1), Kill()]
    assert one == [HandTo(G1), Kill()]
