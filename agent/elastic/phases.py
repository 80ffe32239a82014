"""The elastic agent's life as phases: a pure `transition(state, observation, rules)`.

`ElasticSupervisor` runs one loop: it observes (the trainer's exit, the world, the trainer's
reported timings, the stall watchdog's verdicts, the signal asking it to leave), calls
`transition`, and executes the actions it returns. Only this module decides; it reads no
file, process or clock, so every path, detours included, is table-tested without processes
(`tests/unit/agent/elastic/test_phases.py`). See `Phase` for what each phase does.

The phases are the ones the agent really goes through: besides the usual STANDBY, FORMING,
RUNNING, DRAINING, REGROUPING, FINISHED and LEAVING there is STARTING (the warm trainer
starts before we are a member, so no survivor waits for our import), FINISHING (the job
finished elsewhere while our trainer still runs: it gets a bound to say so) and DONE.
Stopping a trainer (SIGTERM, then SIGKILL) is no phase of its own but `State.stop`: it
happens inside RUNNING, DRAINING, FINISHING, LEAVING and STARTING, each going on as its
own phase says once the trainer is gone.
"""

from __future__ import annotations

import enum
import logging
import signal
from dataclasses import dataclass, field, replace

from agent.elastic.pause import change
from agent.elastic.world import World
from agent.process.trainer_supervisor import TrainerExit
from agent.protocol.control import PEER_LOST_EXIT, RESCALE_EXIT, STANDBY_GENERATION, Timings

IDLE_READ_SECONDS = 1.0
"""How often an idle agent (job finished) reads the store: it only keeps the mark intact."""
STOP_GRACE_SECONDS = 5.0
"""After SIGTERM (then again after SIGKILL), how long a trainer we stop gets to end."""
HANDOVER_STOP_GRACE_SECONDS = 1.0
"""The same for a handed-over trainer that will not take its world: it saved its state."""
KILLED_STATUS = 128 + signal.SIGKILL
"""A trainer's status when SIGKILL ended it: never its own doing, nor ours unless we sent it."""


class Phase(enum.Enum):
    """Where one member is in the job; the supervisor does what its phase says, each round.

    Every phase with a trainer has a deadline, and "stop the trainer" always means SIGTERM,
    then SIGKILL after 5 s (1 s for a hand-over that failed), then giving up after 5 s more.
    A signal (SIGTERM, Ctrl-C) moves STARTING, STANDBY, FORMING, RUNNING, DRAINING and
    REGROUPING to LEAVING (so does the run's time limit, STARTING aside).

    STARTING    The trainer starts warm (generation 0) before we are a member: survivors never
                wait for our process start and framework import. Its first report -> join ->
                STANDBY. Exit -> CRASHED. Not ready in `init_timeout` -> stop it,
                DONE 1.
    STANDBY     A member; the warm trainer waits for a world that includes us. Such a world ->
                hand it to the trainer (it moves there itself) -> RUNNING. A finished world ->
                tell the trainer to go -> FINISHING. Exit -> leave, CRASHED.
    FORMING     A member with no trainer: waits for the members to agree on a world that has
                us and is newer than the last one we started, then starts a trainer in it ->
                RUNNING. A finished world -> FINISHED.
    RUNNING     The trainer trains in (or is still forming) the current world. Each round it
                reads the trainer's timings: it joined, stepped (closes the open rescale
                record), took a world it was handed, or cannot (the world it forms lost a
                member, or the hand-over is older than `drain_timeout`) -> stop it. A newer
                world -> a trainer that re-initialises in-process, or has not joined its
                world yet, is handed the new one (stays RUNNING); any other is asked to stop
                at a step boundary -> DRAINING. Stood still past the stall bound -> kill it,
                leave -> LEAVING (status 1): its peers go on without us. Not joined within
                `init_timeout` -> stop it. A finished world -> FINISHING. Exit: 0 -> FINISHED;
                75/76 or stopped by us or asked for a newer world -> FORMING if it never
                joined its current world, else REGROUPING unless a newer world is already
                known (FORMING); any other status is a crash -> leave, CRASHED, and
                so is a SIGKILL we did not send, even on the way to a newer world.
    DRAINING    Asked to stop at a step boundary: waits for the exit (handled as in RUNNING)
                for `drain_timeout`, or less when the trainer cannot reach a boundary (stood
                still since the decision for the stall bound); then stops it.
    REGROUPING  The collective broke (or a peer drained) and no newer world is known: waits
                `regroup_timeout` for one -> FORMING; else forces a new generation of the
                same members -> FORMING; more than `max_resets` forced in a row without a
                step fails the agent (`RendezvousTimeout`).
    FINISHING   The job finished elsewhere while our trainer runs (or waits warm): gives it
                `drain_timeout` to end, then stops it -> FINISHED. An exit 0 on the way is
                our own finish.
    FINISHED    The job is done: the world record is marked finished (compare-and-swap,
                once), we leave. `on_finished=exit`: retries the mark for a member TTL ->
                DONE 0. `idle`: no trainer; reads the store every second (repairing the mark)
                until a signal or the time limit -> DONE 0.
    LEAVING     We left; the trainer was told to leave at its next boundary (or was killed,
                when it stood still). Exit -> DONE (0 unless a trainer that had joined its
                world crashed). Not gone in `drain_timeout` -> stop it.
    CRASHED     The trainer crashed (in RUNNING, DRAINING, STANDBY or STARTING) and its failure
                was recorded against the job's budget (`agent.elastic.failures`). The world
                the record now says is failed -> FINISHED (the job is over: no trainer, and
                with scale-to-zero the Deployment goes to 0 with a ``JobFailed`` Event), else
                DONE (the trainer's status: the container restarts, a new member).
    DONE        The loop ends with `State.status`.
    """

    STARTING = "starting"
    STANDBY = "standby"
    FORMING = "forming"
    RUNNING = "running"
    DRAINING = "draining"
    REGROUPING = "regrouping"
    FINISHING = "finishing"
    FINISHED = "finished"
    LEAVING = "leaving"
    CRASHED = "crashed"
    DONE = "done"

    @property
    def has_trainer(self) -> bool:
        """A trainer process may be alive: the loop waits on it instead of sleeping."""
        return self in _WITH_TRAINER

    @property
    def ticks_membership(self) -> bool:
        """The loop renews and reads the membership every round.

        Not while STARTING (not a member yet), nor FINISHED (it reads through `Tick`).
        """
        return self not in (Phase.STARTING, Phase.FINISHED, Phase.CRASHED, Phase.DONE)


_WITH_TRAINER = frozenset(
    {
        Phase.STARTING,
        Phase.STANDBY,
        Phase.RUNNING,
        Phase.DRAINING,
        Phase.FINISHING,
        Phase.LEAVING,
    }
)


@dataclass(frozen=True)
class Rules:
    """The bounds the transition applies (from `ElasticSettings` and the membership's)."""

    key: str
    """This member's key: which worlds have us."""
    drain_timeout: float = 30.0
    init_timeout: float = 120.0
    regroup_timeout: float = 20.0
    max_resets: int = 5
    exit_when_finished: bool = False
    """`on_finished=exit`."""
    finish_retry: float = 10.0
    """How long an exiting agent retries marking the job finished (the member TTL)."""


@dataclass(frozen=True)
class Stop:
    """SIGTERM (then SIGKILL) was sent at `since` (monotonic)."""

    since: float
    grace: float
    killed: bool = False


@dataclass(frozen=True)
class State:
    """The phase and what the decisions need to remember across rounds."""

    phase: Phase
    run_deadline: float = float("inf")
    """Monotonic time at which the agent leaves (its `max_seconds`)."""
    deadline: float = float("inf")
    """This phase's bound (monotonic)."""
    running: World | None = None
    """The world of the live trainer (None: warm stand-by, or no trainer)."""
    started_gen: int = -1
    """The newest generation a trainer was started in (or handed)."""
    handed: tuple[int, float] | None = None
    """(generation, wall time) handed to the live trainer, until it takes it."""
    forming: tuple[World, ...] = ()
    """Worlds a handed-over trainer may still be forming (inside its framework)."""
    initialised: bool = False
    """The live trainer joined the collective of `running`."""
    initialised_gen: int = -1
    """The newest generation our trainer joined the collective of."""
    spawned_at: float = 0.0
    noticed: float | None = None
    """Wall time a membership change was first seen pending (the rescale's detection)."""
    resets: int = 0
    """Forced generations in a row without a step."""
    stopped_by_us: bool = False
    trainer_mode: str = "process"
    """What the live trainer reported it does on a rescale (``in-process`` or ``process``)."""
    stop: Stop | None = None
    decided: float | None = None
    """DRAINING / LEAVING: when (wall) the trainer was asked to stop, for `cannot_drain`."""
    broken: World | None = None
    """REGROUPING: the generation whose collective broke."""
    stalled: float = 0.0
    """REGROUPING: when training stood still (wall)."""
    why: str = ""
    """REGROUPING: what the trainer said by its exit."""
    finished_step: int | None = None
    next_read: float = 0.0
    """FINISHED (idle): when to read the store next (monotonic)."""
    status: int | None = None
    """LEAVING: the status to end with regardless of the exit; DONE: the final status."""


@dataclass(frozen=True)
class Observation:
    """What one round saw."""

    now: float
    """Monotonic seconds."""
    wall: float
    signal: int | None = None
    """The signal asking us to leave, once one came."""
    exit: TrainerExit | None = None
    world: World | None = None
    """The newest world (after this round's membership tick)."""
    timings: Timings | None = None
    """The trainer's report of the generation it runs in (generation 0 while warm)."""
    frozen_in_loop: float = 0.0
    """The watchdog's verdict (seconds stood still, else 0) if the trainer is in its loop."""
    frozen_anyway: float = 0.0
    """Its verdict outside the loop (a stopped process)."""
    cannot_drain: bool = False
    """DRAINING / LEAVING: the trainer can no longer reach a step boundary."""
    cannot_form: tuple[int, str] | None = None
    """(generation, who left) when a handed-over trainer forms a world that lost a member."""
    pending_for: float = 0.0
    """Seconds a membership change has been pending (0: none)."""
    rescale_target: int | None = None
    """The generation the open rescale record heads for (None: none open)."""
    stood_still: float | None = None
    """When training stood still, as of now (wall; None: now)."""
    finished_step: int | None = None
    """On an exit: the step a trainer reported finishing the job at, in any generation."""


# -- actions: what the supervisor executes, in order ---------------------------------------------


@dataclass(frozen=True)
class StartWarm:
    """Clear the control channel and start the trainer in the stand-by generation."""


@dataclass(frozen=True)
class StartTrainer:
    """Clear the control channel, start a new trainer process in `world`."""

    world: World


@dataclass(frozen=True)
class HandTo:
    """Write `world` for the live trainer, which moves there itself."""

    world: World


@dataclass(frozen=True)
class HandOver:
    """Write the next world (None: leave) and ask the trainer to drain to `generation`."""

    world: World | None
    generation: int


@dataclass(frozen=True)
class Terminate:
    """SIGTERM to the trainer."""


@dataclass(frozen=True)
class Kill:
    """SIGKILL to the trainer."""


@dataclass(frozen=True)
class Join:
    """First heartbeat: we are a member."""


@dataclass(frozen=True)
class Leave:
    """Withdraw our heartbeat."""


@dataclass(frozen=True)
class Tick:
    """One membership round (FINISHED reads the store on its own schedule)."""


@dataclass(frozen=True)
class LearnFramework:
    """Later trainers start in the variables of the framework this one reported."""

    name: str


@dataclass(frozen=True)
class OpenRescale:
    """Open (or extend) this survivor's rescale record towards `world`."""

    world: World
    why: str
    decided: float
    from_generation: int
    stalled: float = 0.0
    noticed: float | None = None


@dataclass(frozen=True)
class MarkDrained:
    """The open rescale's old trainer is gone (wall time `at`)."""

    at: float


@dataclass(frozen=True)
class Stepped:
    """The trainer stepped in `generation`: close the open rescale if it ends there."""

    generation: int
    timings: Timings


@dataclass(frozen=True)
class RequestGeneration:
    """Force a new generation of the same members."""

    reason: str


@dataclass(frozen=True)
class Fail:
    """Give up: the supervisor raises `RendezvousTimeout`."""

    message: str


@dataclass(frozen=True)
class RecordFinish:
    """Mark the world record finished (once), leave, say so."""

    step: int | None
    late: bool


@dataclass(frozen=True)
class RecordFailure:
    """Append the trainer's failure (its status, its log tail) to the world record."""

    status: int


@dataclass(frozen=True)
class TryFinish:
    """Try the finish mark again (the store was unreachable)."""

    step: int | None


@dataclass(frozen=True)
class Log:
    """One log line of the supervisor's logger."""

    level: int
    message: str


Action = (
    StartWarm
    | StartTrainer
    | HandTo
    | HandOver
    | Terminate
    | Kill
    | Join
    | Leave
    | Tick
    | LearnFramework
    | OpenRescale
    | MarkDrained
    | Stepped
    | RequestGeneration
    | Fail
    | RecordFinish
    | RecordFailure
    | TryFinish
    | Log
)


@dataclass
class _Round:
    """The actions one transition collects."""

    actions: list[Action] = field(default_factory=list)

    def do(self, *actions: Action) -> None:
        self.actions.extend(actions)

    def log(self, level: int, message: str) -> None:
        self.actions.append(Log(level, message))


# -- helpers the observer shares -----------------------------------------------------------------


def in_training_loop(handed: tuple[int, float] | None, timings: Timings | None) -> bool:
    """The trainer steps in its generation (not starting, re-forming, or finishing).

    Only there does a stale report mean it stands still: a framework may hold the
    interpreter lock while it forms a group, and a finished trainer's report is closed.
    """
    if handed is not None or timings is None:
        return False
    return timings.first_step is not None and not timings.finished


def cannot_form(
    forming: tuple[World, ...], timings: dict[int, Timings], handed: World
) -> tuple[int, str] | None:
    """(generation, who left) when the trainer forms a world that lost a member since.

    That formation blocks in C++ until a timeout, so waiting for the trainer to take
    `handed` is pointless; a world that only grew still forms, so it is waited for.
    """
    for world in forming:
        t = timings.get(world.generation)
        if t is None or t.master is None or t.initialised is not None:
            continue
        left = {m.key for m in world.members} - {m.key for m in handed.members}
        if left:
            ids = sorted(m.id for m in world.members if m.key in left)
            return world.generation, ", ".join(ids)
    return None


def leave_status(status: int, initialised: bool) -> int:
    """The agent's status when its trainer ended while it left the job."""
    if status in (0, RESCALE_EXIT, PEER_LOST_EXIT) or not initialised:
        # A trainer that had not joined its world (still starting, or re-forming in-process
        # with its state saved first) lost nothing by being stopped: a clean leave.
        return 0
    return status


# -- the transition ------------------------------------------------------------------------------


def begin(
    now: float,
    rules: Rules,
    finished: bool,
    step: int | None,
    run_deadline: float,
    warm: bool = False,
) -> tuple[State, list[Action]]:
    """The first state: FINISHED when the job is known done, else STARTING (a warm trainer).

    `warm`: the agent already started its warm trainer, before it could read the store (the
    trainer's import then runs while the agent starts up). STARTING starts none then; a job
    found finished tells that trainer to go, as STANDBY does, and is FINISHING until it is gone
    (`Leave` first: a member's round would renew a heartbeat this agent never announced).
    """
    r = _Round()
    if finished and warm:
        r.do(Leave(), HandOver(None, STANDBY_GENERATION + 1))  # it never joined a world
        state = State(
            Phase.FINISHING,
            run_deadline=run_deadline,
            deadline=now + rules.drain_timeout,
            finished_step=step,
        )
        return state, r.actions
    if finished:
        state = _finish(State(Phase.STARTING, run_deadline=run_deadline), now, rules, r, step, True)
        return state, r.actions
    state = State(Phase.STARTING, run_deadline=run_deadline, deadline=now + rules.init_timeout)
    return state, [] if warm else [StartWarm()]


def transition(state: State, obs: Observation, rules: Rules) -> tuple[State, list[Action]]:
    """The next state and the actions that get there, from one round's observation."""
    r = _Round()
    return _PHASES[state.phase](state, obs, rules, r), r.actions


def _member(world: World | None, rules: Rules) -> bool:
    return world is not None and world.rank_of(rules.key) is not None


def _signal_name(signum: int) -> str:
    return f"signal {signal.Signals(signum).name}"


def _leave_cause(s: State, o: Observation) -> str | None:
    if o.signal is not None:
        return _signal_name(o.signal)
    if o.now >= s.run_deadline:
        return "time limit reached"
    return None


def _terminate(s: State, o: Observation, r: _Round, grace: float = STOP_GRACE_SECONDS) -> State:
    """SIGTERM now, SIGKILL after `grace`: the trainer was ours to stop, not a crash."""
    r.do(Terminate())
    return replace(s, stop=Stop(o.now, grace), stopped_by_us=True)


def _escalate(s: State, o: Observation, r: _Round) -> tuple[State, bool]:
    """Moves a pending stop on (SIGKILL after the grace); True once it gave up waiting."""
    stop = s.stop
    if stop is None or o.exit is not None or o.now - stop.since < stop.grace:
        return s, False
    if not stop.killed:
        r.do(Kill())
        return replace(s, stop=Stop(o.now, stop.grace, killed=True)), False
    return replace(s, stop=None), True


def _done(s: State, status: int) -> State:
    return replace(s, phase=Phase.DONE, status=status, running=None, stop=None)


def _leave(s: State, o: Observation, rules: Rules, r: _Round, why: str) -> State:
    """Leave the job: tell the trainer (warm or live) to go at its next boundary."""
    r.log(logging.INFO, f"{why}: leaving the job")
    r.do(Leave())
    leaving = replace(s, phase=Phase.LEAVING, deadline=o.now + rules.drain_timeout)
    if s.phase in (Phase.STARTING, Phase.STANDBY):  # the warm trainer never joined a world
        r.do(HandOver(None, STANDBY_GENERATION + 1))
        return replace(leaving, status=0, decided=None)
    if s.running is None:
        return _done(s, 0)
    known = o.world.generation if o.world is not None else 0
    r.do(HandOver(None, max(s.running.generation, known) + 1))
    return replace(leaving, decided=o.wall)


def _crashed(s: State, o: Observation, r: _Round, recorded: int, status: int) -> State:
    """The trainer crashed with `recorded`: count it against the job's budget, then decide.

    Not in a finished job: a crash on the way out of one costs nothing.
    """
    if s.phase is Phase.FINISHING or (o.world is not None and o.world.finished):
        return _done(s, status)
    r.do(RecordFailure(recorded))
    return replace(s, phase=Phase.CRASHED, status=status, running=None, stop=None)


def _finish(s: State, now: float, rules: Rules, r: _Round, step: int | None, late: bool) -> State:
    r.do(RecordFinish(step, late))
    return replace(
        s,
        phase=Phase.FINISHED,
        running=None,
        handed=None,
        stop=None,
        finished_step=step,
        deadline=now + rules.finish_retry,
        next_read=now + IDLE_READ_SECONDS,
    )


def _start(s: State, world: World, o: Observation, r: _Round) -> State:
    r.do(StartTrainer(world))
    return replace(
        s,
        phase=Phase.RUNNING,
        trainer_mode="process",  # until the new trainer reports what it can do
        running=world,
        started_gen=world.generation,
        spawned_at=o.wall,
        initialised=False,
        noticed=None,
        stop=None,
        decided=None,
    )


def _hand_to_live(s: State, world: World, o: Observation, r: _Round) -> State:
    """The running trainer (or warm stand-by) moves itself into `world`."""
    forming = s.forming
    if s.running is not None and not s.initialised:
        forming = (*forming, s.running)  # it may be inside its framework's formation
    r.do(HandTo(world))
    return replace(
        s,
        phase=Phase.RUNNING,
        running=world,
        started_gen=world.generation,
        spawned_at=o.wall,
        handed=(world.generation, o.wall),
        initialised=False,
        noticed=None,
        forming=forming,
    )


def _collect(s: State, o: Observation, rules: Rules, r: _Round) -> tuple[State, bool]:
    """Learns from the live trainer's timings; True when it had to be stopped."""
    running = s.running
    assert running is not None
    reported = o.timings
    times = reported or Timings()
    if reported is not None:
        s = replace(s, trainer_mode=reported.reinit)
        if reported.framework:
            r.do(LearnFramework(reported.framework))
    handed = s.handed
    if handed is not None and (times.started or times.imported) is not None:
        s = replace(s, handed=None, forming=())  # the trainer took the world it was handed
    elif handed is not None and o.cannot_form is not None:
        gen, gone = o.cannot_form
        r.log(
            logging.WARNING,
            f"the trainer is forming generation {gen}, which cannot form any more ({gone} "
            f"left); restarting it in generation {running.generation}",
        )
        s = replace(s, handed=None, forming=())
        return _terminate(s, o, r, HANDOVER_STOP_GRACE_SECONDS), True
    elif handed is not None and o.wall - handed[1] > rules.drain_timeout:
        r.log(
            logging.ERROR,
            f"trainer did not take generation {handed[0]} within "
            f"{rules.drain_timeout:.0f} s; stopping it",
        )
        s = replace(s, handed=None, forming=())
        return _terminate(s, o, r, HANDOVER_STOP_GRACE_SECONDS), True
    if times.initialised is not None:
        s = replace(s, initialised=True, initialised_gen=running.generation)
    if times.first_step is not None:
        s = replace(s, resets=0)
        r.do(Stepped(running.generation, times))
    return s, False


def _on_exit(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    """The live trainer ended: the job is done, it regroups, or it crashed."""
    running, ended = s.running, o.exit
    assert running is not None and ended is not None
    s, _ = _collect(s, o, rules, r)  # a stop it asks for has nothing left to stop
    s = replace(s, running=None, handed=None, stop=None, decided=None)
    if ended.status == 0:
        r.log(logging.INFO, "trainer finished: the job is done")
        step = o.timings.finished_step if o.timings is not None else None
        if step is None:  # it finished in the world it trained in, before the one handed
            step = o.finished_step
        return _finish(s, o.now, rules, r, step, late=False)
    target = o.rescale_target
    requested = target is not None and target > running.generation
    ours = s.stopped_by_us
    s = replace(s, stopped_by_us=False)
    # A SIGKILL we did not send (the OOM killer's, an operator's) is a crash even when the
    # trainer was on its way to a newer world: it never reached its boundary, and its member
    # leaves as after any crash instead of rejoining the world it was killed on the way to.
    killed = ended.status == KILLED_STATUS and not ours
    if not killed and (ended.status in (RESCALE_EXIT, PEER_LOST_EXIT) or requested or ours):
        if s.initialised_gen < running.generation:
            # It never joined its current world: start afresh in the newest one, without
            # forcing a generation (the others may well be waiting for us in it).
            return _forming(
                replace(s, phase=Phase.FORMING, started_gen=s.initialised_gen), o, rules, r
            )
        if requested:
            return _forming(replace(s, phase=Phase.FORMING), o, rules, r)
        why = "stopped for a rescale" if ended.status == RESCALE_EXIT else "lost a peer"
        r.log(
            logging.WARNING,
            f"generation {running.generation}: trainer {why}; waiting for the new world",
        )
        stalled = o.stood_still if o.stood_still is not None else o.wall
        if o.timings is not None and o.timings.stopped is not None:
            stalled = o.timings.stopped  # its own word: the end of its last step
        return replace(
            s,
            phase=Phase.REGROUPING,
            broken=running,
            stalled=stalled,
            why=why,
            deadline=o.now + rules.regroup_timeout,
        )
    r.log(logging.ERROR, f"{ended.describe()}: leaving the job (a crash counts as a scale-down)")
    r.do(Leave())
    return _crashed(s, o, r, ended.status, ended.status)


def _starting(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    if s.stop is not None:  # not ready in time: being stopped
        s, gave_up = _escalate(s, o, r)
        return _done(s, 1) if o.exit is not None or gave_up else s
    if o.signal is not None:
        return _leave(s, o, rules, r, _signal_name(o.signal))
    if o.timings is not None:
        if o.timings.framework:
            r.do(LearnFramework(o.timings.framework))
        r.do(Join())
        return replace(s, phase=Phase.STANDBY, deadline=float("inf"))
    if o.exit is not None:
        r.log(logging.ERROR, f"{o.exit.describe()} before joining the job")
        return _crashed(s, o, r, o.exit.status, o.exit.status or 1)
    if o.now >= s.deadline:
        r.log(logging.ERROR, f"the trainer was not ready within {rules.init_timeout:.0f} s")
        return _terminate(s, o, r)
    return s


def _standby(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    why = _leave_cause(s, o)
    if why is not None:
        return _leave(s, o, rules, r, why)
    if o.exit is not None:
        r.log(logging.ERROR, f"{o.exit.describe()} while waiting for a world: leaving the job")
        r.do(Leave())
        return _crashed(s, o, r, o.exit.status, o.exit.status or 1)
    world = o.world
    if world is not None and world.finished:
        r.do(HandOver(None, STANDBY_GENERATION + 1))  # the warm trainer never joined a world
        return replace(
            s,
            phase=Phase.FINISHING,
            deadline=o.now + rules.drain_timeout,
            finished_step=world.finished_at_step,
        )
    if world is None or world.paused or not _member(world, rules):
        return s
    return _hand_to_live(s, world, o, r)


def _forming(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    why = _leave_cause(s, o)
    if why is not None:
        return _leave(s, o, rules, r, why)
    world = o.world
    if world is not None and world.finished:
        return _finish(s, o.now, rules, r, world.finished_at_step, late=True)
    if world is None or world.paused or not _member(world, rules):
        return s
    if world.generation > s.started_gen:
        return _start(s, world, o, r)
    return s


def _running(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    why = _leave_cause(s, o)
    if why is not None:
        return _leave(s, o, rules, r, why)
    running = s.running
    assert running is not None
    if o.exit is not None:
        return _on_exit(s, o, rules, r)
    if s.stop is not None:  # asked to stop: wait for the exit
        s, _ = _escalate(s, o, r)  # a trainer that outlives SIGKILL is watched on
        return s
    world = o.world
    if world is not None and world.finished:
        # Our trainer is most likely finishing too; give it the drain bound to say so.
        return replace(
            s,
            phase=Phase.FINISHING,
            deadline=o.now + rules.drain_timeout,
            finished_step=world.finished_at_step,
        )
    s, stopping = _collect(s, o, rules, r)
    if stopping:
        return s
    frozen = o.frozen_in_loop if in_training_loop(s.handed, o.timings) else o.frozen_anyway
    if frozen:
        # Its peers' collective then fails at once (the process is gone) instead of timing
        # out, and they go on without this member; on Kubernetes the container restarts
        # and rejoins as a new member.
        r.log(
            logging.ERROR,
            f"trainer stood still for {frozen:.0f} s (stopped, or frozen without refreshing "
            "its report); killing it and leaving the job",
        )
        r.do(Kill(), Leave())
        stop = Stop(o.now, STOP_GRACE_SECONDS, killed=True)
        return replace(s, phase=Phase.LEAVING, status=1, stop=stop, deadline=float("inf"))
    if s.noticed is None and o.pending_for > 0:
        s = replace(s, noticed=o.wall - o.pending_for)
    if world is not None and world.generation != running.generation:
        return _drain(s, world, o, rules, r)
    if not s.initialised and o.wall - s.spawned_at > rules.init_timeout:
        r.log(
            logging.ERROR,
            f"generation {running.generation} did not form within "
            f"{rules.init_timeout:.0f} s; stopping the trainer",
        )
        return _terminate(s, o, r)  # the exit is then handled as ours
    return s


def _drain(s: State, world: World, o: Observation, rules: Rules, r: _Round) -> State:
    """A new generation while our trainer runs: hand it over, or stop it at a boundary.

    A trainer that re-initialises in-process, or that has not joined its world yet (still
    starting, or meeting its peers), is handed the new world and keeps running: it moves
    there itself. Any other is waited for at its next step boundary (it exits 75) and
    restarted in FORMING.
    """
    running = s.running
    assert running is not None
    member = _member(world, rules)
    if member:
        r.do(OpenRescale(world, change(running, world), o.wall, running.generation, 0.0, s.noticed))
    step = f"generation {running.generation} -> {world.generation}"
    if member and (not s.initialised or s.trainer_mode == "in-process"):
        how = (
            "asking the trainer to stop at a step boundary and re-initialise in-process"
            if s.initialised
            else "handing the new world to the trainer (it has not joined its world yet)"
        )
        r.log(logging.INFO, f"{step}: {how}")
        return _hand_to_live(s, world, o, r)
    r.log(logging.INFO, f"{step}: asking the trainer to stop at a step boundary")
    r.do(HandOver(world if member else None, world.generation))
    return replace(s, phase=Phase.DRAINING, decided=o.wall, deadline=o.now + rules.drain_timeout)


def _draining(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    why = _leave_cause(s, o)
    if why is not None:
        return _leave(s, o, rules, r, why)
    if o.exit is not None:
        r.do(MarkDrained(o.wall))
        return _on_exit(s, o, rules, r)
    if s.stop is not None:
        s, gave_up = _escalate(s, o, r)
        if gave_up:  # it outlived SIGKILL: watch it on
            r.do(MarkDrained(o.wall))
            return replace(s, phase=Phase.RUNNING, decided=None)
        return s
    if o.now >= s.deadline or o.cannot_drain:
        decided = s.decided if s.decided is not None else o.wall
        r.log(
            logging.ERROR,
            f"trainer did not reach a step boundary within {o.wall - decided:.0f} s; killing it",
        )
        return _terminate(s, o, r)
    return s


def _regrouping(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    why = _leave_cause(s, o)
    if why is not None:
        return _leave(s, o, rules, r, why)
    broken = s.broken
    assert broken is not None
    world = o.world
    if world is not None and world.generation > broken.generation:
        # The trainer was gone before the decision: waiting was detection, not drain.
        if _member(world, rules):
            why = f"{s.why}, {change(broken, world)}"
            r.do(OpenRescale(world, why, o.wall, world.generation - 1, s.stalled))
        r.do(MarkDrained(o.wall))
        return _forming(replace(s, phase=Phase.FORMING), o, rules, r)
    if o.now < s.deadline:
        return s
    resets = s.resets + 1
    if resets > rules.max_resets:
        r.do(Fail(f"{resets - 1} forced generations without progress"))
        return _done(s, 1)
    r.do(RequestGeneration(f"collective of generation {broken.generation} broke"))
    forced = World(broken.generation + 1, broken.members)
    if _member(forced, rules):
        why = f"{s.why}, forced a generation"
        r.do(OpenRescale(forced, why, o.wall, forced.generation - 1, s.stalled))
    r.do(MarkDrained(o.wall))
    return _forming(replace(s, phase=Phase.FORMING, resets=resets), o, rules, r)


def _finishing(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    if o.exit is not None:
        if s.running is not None and s.stop is None:
            after = _on_exit(s, o, rules, r)
            if after.phase in (Phase.FINISHED, Phase.DONE):
                return after
            s = after  # it stopped for a rescale: the job is finished all the same
        return _finish(s, o.now, rules, r, s.finished_step, late=True)
    s, gave_up = _escalate(s, o, r)
    if gave_up:
        return _finish(s, o.now, rules, r, s.finished_step, late=True)
    if s.stop is None and o.now >= s.deadline:
        if s.running is not None:
            r.log(logging.WARNING, "the job is finished but the trainer still runs; stopping it")
        return _terminate(s, o, r)
    return s


def _finished(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    recorded = o.world is not None and o.world.finished
    if rules.exit_when_finished:
        if recorded or o.now >= s.deadline or o.signal is not None:
            if not recorded:
                r.log(logging.WARNING, "could not mark the job finished in the membership store")
            failed = o.world is not None and o.world.failed
            return _done(s, 1 if failed else 0)  # a failed job is a failed Job
        r.do(TryFinish(s.finished_step))
        return s
    why = _leave_cause(s, o)
    if why is not None:
        r.log(logging.INFO, f"{why}: exiting (the job was finished)")
        return _done(s, 0)
    if o.now >= s.next_read:
        r.do(Tick() if recorded else TryFinish(s.finished_step))  # Tick repairs a mangled mark
        return replace(s, next_read=o.now + IDLE_READ_SECONDS)
    return s


def _leaving(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    if s.running is not None and o.timings is not None and o.timings.first_step is not None:
        # A rescale it stepped out of just before the leave still ends at that step: the
        # pause it lived through is counted and logged like any other.
        r.do(Stepped(s.running.generation, o.timings))
    if o.exit is not None:
        status = s.status
        return _done(
            s, status if status is not None else leave_status(o.exit.status, s.initialised)
        )
    s, gave_up = _escalate(s, o, r)
    if gave_up:
        return _done(s, s.status or 0)
    if s.stop is None and (o.now >= s.deadline or (s.decided is not None and o.cannot_drain)):
        if s.decided is not None:
            r.log(
                logging.ERROR,
                f"trainer did not stop within {o.wall - s.decided:.0f} s; killing it",
            )
        return _terminate(s, o, r)
    return s


def _crashed_out(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    if o.world is not None and o.world.failed:
        r.log(logging.ERROR, "the job's failures exceeded its budget: the job is failed")
        return _finish(s, o.now, rules, r, None, late=True)
    return _done(s, 1 if s.status is None else s.status)


def _over(s: State, o: Observation, rules: Rules, r: _Round) -> State:
    return s


_PHASES = {
    Phase.STARTING: _starting,
    Phase.STANDBY: _standby,
    Phase.FORMING: _forming,
    Phase.RUNNING: _running,
    Phase.DRAINING: _draining,
    Phase.REGROUPING: _regrouping,
    Phase.FINISHING: _finishing,
    Phase.FINISHED: _finished,
    Phase.LEAVING: _leaving,
    Phase.CRASHED: _crashed_out,
    Phase.DONE: _over,
}
