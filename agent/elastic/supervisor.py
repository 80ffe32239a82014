"""The elastic agent loop: keep the trainer running in the current world, across generations.

It drives a `Trainer` (`TrainerSupervisor`: one process per incarnation) from the world
that `Membership` agrees on, in one loop: observe, `agent.elastic.phases.transition`,
execute the actions; the phases and their transitions are documented on `Phase`. A new
generation asks the running trainer to stop at a step boundary (the trainers agree on
which), waits for it within a bound, and starts the next incarnation in the new world
(written in its framework's variables: the framework the warm trainer reported using);
survivors then hand their state to joiners. Everything said to and
heard from the trainer goes through `agent.protocol.control.ControlChannel`.
Every path out of a phase has a deadline: a trainer that will not drain is stopped, a
rendezvous that never completes is abandoned, a broken collective with no membership change
forces a fresh generation, and a budget stops endless retries.

When the trainer exits 0 the job is done: the agent marks the world record finished (once, by
compare-and-swap), and from then on, like any agent that starts or waits as a stand-by and
reads a finished world, starts no trainer. By default it idles (serving /metrics and a ready
/readyz) until SIGTERM, then exits 0, so a Deployment neither restarts the job nor crash-loops;
``on_finished="exit"`` exits 0 at once instead (Jobs, local runs).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from agent.collectors.progress import EtaEstimator, ProgressPoint
from agent.elastic.failures import FailurePolicy, TrainerFailure, kept_tail
from agent.elastic.job_status import JobStatus, StatusReporter, job_phase, rescale_text
from agent.elastic.membership import Membership
from agent.elastic.option_table import DEFAULTS
from agent.elastic.pause import RescaleRecord, RescaleTracker
from agent.elastic.phases import (
    Action,
    Fail,
    HandOver,
    HandTo,
    Join,
    Kill,
    LearnFramework,
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
    StartWarm,
    State,
    Stepped,
    Terminate,
    Tick,
    TryFinish,
    begin,
    cannot_form,
    in_training_loop,
    transition,
)
from agent.elastic.trainer_seam import Trainer, read_progress
from agent.elastic.watchdog import StallWatchdog
from agent.elastic.world import World
from agent.process.rescales import RescaleLog
from agent.process.trainer_supervisor import TrainerExit
from agent.protocol import env as names
from agent.protocol.control import STANDBY_GENERATION, ControlChannel, NextWorld, Timings
from agent.protocol.errors import ElasticError, RendezvousTimeout
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.reports import read_report

log = logging.getLogger(__name__)

PROGRESS_READ_SECONDS = 1.0
"""How often rank 0 reads its trainer's progress for the status's ETA (the rate's points)."""
WAKE_SLICE = 0.02
"""Seconds between looks at the trainer's exit while waiting on the store's watch."""
ON_FINISHED = ("idle", "exit", "scale-to-zero")
"""What an agent does once the job is finished: stay up until SIGTERM, exit 0 at once, or stay
up and scale its Deployment to 0 (`agent.elastic.finished_job`)."""


def default_backend() -> str:
    """`nccl` when this machine has an NVIDIA device, else `gloo` (CPU)."""
    return "nccl" if Path("/dev/nvidia0").exists() else "gloo"


@dataclass(frozen=True)
class ElasticSettings:
    """Timeouts of the rescale phases.

    Flags and ``EDL_`` variables of `agent.elastic.option_table`, which holds the defaults.
    """

    drain_timeout: float = DEFAULTS["drain_timeout"]
    """EDL_DRAIN_TIMEOUT: a trainer asked to stop gets this long to reach a step boundary."""
    init_timeout: float = DEFAULTS["init_timeout"]
    """EDL_INIT_TIMEOUT: a new trainer must have joined its collective within this long."""
    regroup_timeout: float = DEFAULTS["regroup_timeout"]
    """EDL_REGROUP_TIMEOUT: after a broken collective, wait this long for a membership change
    before forcing a fresh generation of the same members."""
    max_resets: int = DEFAULTS["max_resets"]
    """EDL_MAX_RESETS: forced generations in a row without a completed step before giving up."""
    stall_timeout: float = DEFAULTS["stall_timeout"]
    """EDL_STALL_TIMEOUT: a trainer stopped (SIGSTOP) this long, or in its training loop
    without refreshing its report for three times this long, stands still: it is killed and
    this member leaves the job (`StallWatchdog`). 0 disables."""
    backend: str = ""
    """EDL_DISTRI_BACKEND: `gloo` or `nccl`; empty picks by the presence of a GPU."""
    on_finished: str = DEFAULTS["on_finished"]
    """EDL_ON_FINISHED (--on-finished): once the job is finished, `idle` until SIGTERM (a
    Deployment must not restart the container) or `exit` 0 at once (a Job, a local run)."""
    failures: FailurePolicy = field(default_factory=FailurePolicy)
    """EDL_FAILURE_BUDGET, EDL_FAILURE_WINDOW (--failure-budget, --failure-window): how many
    trainer failures, across the job's members, within how long, before the job is failed."""

    def __post_init__(self) -> None:
        if self.on_finished not in ON_FINISHED:
            raise ValueError(
                f"on_finished {self.on_finished!r}: expected idle, exit or scale-to-zero"
            )


def backend_of(settings: ElasticSettings) -> str:
    """The collective backend trainers are started with (`ElasticSettings.backend`, else by GPU)."""
    return settings.backend or default_backend()


def start_warm(trainer: Trainer, control_dir: Path, backend: str) -> None:
    """Starts the trainer warm (the stand-by generation) on a cleared control channel.

    `run_elastic` calls it first thing, before the agent's own start-up (the membership store,
    and on Kubernetes its client; the exporter): the trainer's process start and framework
    import, the longest part of a joiner's way to its first step, then run meanwhile.
    """
    channel = ControlChannel(control_dir)
    channel.directory.mkdir(parents=True, exist_ok=True)
    channel.clear()
    trainer.start(TrainerWorld(generation=STANDBY_GENERATION, backend=backend))


def trainer_world(world: World, key: str, backend: str) -> TrainerWorld:
    """This member's view of `world`: its rank, the endpoints, rank 0's as the master."""
    rank = world.rank_of(key)
    if rank is None:
        raise ValueError(f"{key} is not in generation {world.generation}")
    endpoints = tuple(world.endpoints)
    return TrainerWorld(
        rank=rank,
        world_size=world.size,
        generation=world.generation,
        endpoints=endpoints,
        current_endpoint=endpoints[rank],
        master=world.master,
        backend=backend,
    )


class ElasticSupervisor:
    """Runs one pod's trainer through every generation until the job ends or we leave.

    The loop (`run`) is the only place that waits, reads the membership, the trainer and
    its control channel; what to do about what it saw is `transition` (pure), what that
    takes is `_execute`.
    """

    def __init__(
        self,
        membership: Membership,
        trainer: Trainer,
        control_dir: Path,
        rescales: RescaleLog,
        settings: ElasticSettings,
        wall_clock: Callable[[], float] = time.time,
        job: str = "",
        watchdog: StallWatchdog | None = None,
        finished_elsewhere: Callable[[], int | None] | None = None,
        on_job_finished: Callable[[int | None], object] | None = None,
        warm_started: bool = False,
        on_job_failed: Callable[[tuple[TrainerFailure, ...]], object] | None = None,
    ) -> None:
        self._membership = membership
        self._warm_started = warm_started
        """The warm trainer was started before this supervisor (`start_warm`)."""
        self._on_job_finished = on_job_finished
        """Called once with the agreed step when this agent learns the job is finished
        (scale-to-zero); an error is logged, the agent idles on."""
        self._on_job_failed = on_job_failed
        """Called once, instead, with the last failures when the job is failed."""
        self._failures = settings.failures
        self._status = StatusReporter(membership.report_status)
        """Rank 0's agent keeps the job's status summary (`agent.elastic.job_status`)."""
        self._eta = EtaEstimator()
        self._last_rescale: tuple[str, str] = ("", "")
        self._progress_read = float("-inf")
        self._finished_elsewhere = finished_elsewhere
        """The step at which another record (the newest durable checkpoint) says the job
        finished, or None: checked at start, when the world record does not say it."""
        self._job = job or "(unnamed)"
        self._trainer = trainer
        self._channel = ControlChannel(control_dir)
        self._rescales = rescales
        self._backend = backend_of(settings)
        self._wall = wall_clock
        self._watchdog = watchdog or StallWatchdog(settings.stall_timeout, flush_seconds=1.0)
        self._key = membership.me.key
        self._rules = Rules(
            key=self._key,
            drain_timeout=settings.drain_timeout,
            init_timeout=settings.init_timeout,
            regroup_timeout=settings.regroup_timeout,
            max_resets=settings.max_resets,
            exit_when_finished=settings.on_finished == "exit",
            finish_retry=membership.settings.ttl,
        )
        self._rescale = RescaleTracker()
        self._state = State(Phase.STARTING)
        self._stop_signal: int | None = None
        self._signals = 0
        """Signals received (`request_stop`); `_observed_signals` of them reached a round."""
        self._observed_signals = 0
        self._job_finished = False
        self._job_failed = False
        self._finished_at_step: int | None = None
        self._started = False
        """`run` has read the job's world (what it starts from is decided)."""

    @property
    def phase(self) -> Phase:
        """Where this member is (see `Phase`)."""
        return self._state.phase

    @property
    def job_finished(self) -> bool:
        """True once this agent knows the job is done (it then never starts a trainer)."""
        return self._job_finished

    @property
    def job_failed(self) -> bool:
        """True once this agent knows the job is over because of its failures."""
        return self._job_failed

    @property
    def failures(self) -> tuple[TrainerFailure, ...]:
        """The trainer failures the newest world record this agent read keeps."""
        world = self._membership.world
        return () if world is None else world.failures

    @property
    def finished_at_step(self) -> int | None:
        """The global step the job finished at, when known."""
        return self._finished_at_step

    @property
    def started(self) -> bool:
        """True once `run` has read the job's world.

        Before, a warm trainer that runs may be one a finished job is about to send away
        (`readiness_of`).
        """
        return self._started

    def request_stop(self, signum: int, frame: FrameType | None = None) -> None:
        """Signal handler: leave the job cleanly (pod deletion, Ctrl-C)."""
        self._stop_signal = signum
        self._signals += 1  # ends the round's wait within a slice (`_signalled`)

    def run(self, max_seconds: float = float("inf")) -> int:
        """Blocks until the job ends (trainer exit 0), we leave, or a failure; returns a status.

        Raises:
            RendezvousTimeout: too many forced generations in a row without a step.
        """
        self._channel.directory.mkdir(parents=True, exist_ok=True)
        now = time.monotonic()
        world = self._membership.peek()
        finished, step = world is not None and world.finished, None
        if world is not None and world.finished:
            step = world.finished_at_step
        elif self._finished_elsewhere is not None:
            step = self._finished_elsewhere()
            if step is not None:
                finished = True
                log.info("the newest checkpoint says job %s finished at step %d", self._job, step)
        state, actions = begin(
            now, self._rules, finished, step, now + max_seconds, warm=self._warm_started
        )
        if finished:  # known now, though a warm trainer may still be on its way out
            self._job_finished, self._finished_at_step = True, step
            self._job_failed = world is not None and world.failed
        self._started = True
        try:
            while True:
                self._state = state
                for action in actions:
                    self._execute(action)
                self._report_status()
                if state.phase is Phase.DONE:
                    assert state.status is not None
                    return state.status
                state, actions = transition(state, self._observe(state), self._rules)
        finally:
            self._membership.close()

    # -- observing ------------------------------------------------------------------------------

    def _observe(self, s: State) -> Observation:
        """One round's look: waits a poll interval (on the trainer, when one may run)."""
        poll = self._membership.settings.poll_interval
        due = self._membership.due_in()
        if due is not None:
            poll = min(poll, due + WAKE_SLICE)  # just past it: the tick then finds it due
        if s.phase.ticks_membership:
            ended = self._wait(poll, s.phase.has_trainer)
        elif s.phase.has_trainer:  # STARTING: the one phase with a trainer and no membership
            ended = self._await_warm(poll)
        else:
            ended = None
            for _ in range(max(1, math.ceil(poll / WAKE_SLICE))):
                if self._signalled():
                    break
                time.sleep(WAKE_SLICE)
        self._observed_signals = self._signals
        world = self._membership.tick() if s.phase.ticks_membership else self._membership.world
        generation = s.running.generation if s.running is not None else STANDBY_GENERATION
        timings = self._channel.timings(generation) if s.phase.has_trainer else None
        wall = self._wall()
        if s.phase.has_trainer:
            # before a restart clears the control folder: a world stepped in on the way
            self._record(self._rescale.passed(self._channel.timings))
            progress, stopped = read_progress(self._trainer)
            self._watchdog.observe(progress)
            self._watchdog.observe_state(stopped, wall)
        forming = None
        if s.handed is not None and s.running is not None and s.forming:
            reported = {w.generation: self._channel.timings(w.generation) for w in s.forming}
            known = {g: t for g, t in reported.items() if t is not None}
            forming = cannot_form(s.forming, known, s.running)
        return Observation(
            now=time.monotonic(),
            wall=wall,
            signal=self._stop_signal,
            exit=ended,
            world=world,
            timings=timings,
            frozen_in_loop=self._watchdog.frozen_for(wall, True),
            frozen_anyway=self._watchdog.frozen_for(wall, False),
            cannot_drain=s.decided is not None and self._cannot_drain(s, timings, wall),
            cannot_form=forming,
            pending_for=self._membership.pending_for(),
            rescale_target=self._rescale.target,
            stood_still=self._watchdog.stood_still_since(wall),
            finished_step=self._channel.finished_step() if ended is not None else None,
        )

    def _signalled(self) -> bool:
        """A signal came that no round has observed yet (a SIGTERM: leave now, not a poll later)."""
        return self._signals > self._observed_signals

    def _wait(self, poll: float, trainer: bool) -> TrainerExit | None:
        """Up to a poll interval, ended early by the trainer's exit, a store change or a signal.

        The store's watch makes detection a matter of milliseconds; the poll stays as the
        safety net (heartbeats expire by time, and a notification may be lost). A signal is
        looked for every `WAKE_SLICE`: a planned leave starts within ~20 ms of its SIGTERM.
        """
        deadline = time.monotonic() + poll
        while True:
            left = max(0.0, deadline - time.monotonic())
            if self._signalled():
                return None
            if trainer:
                ended = self._trainer.wait(min(left, WAKE_SLICE))
                if ended is not None:
                    return ended
                if self._membership.wait_for_change(0):
                    return None
            elif self._membership.wait_for_change(min(left, WAKE_SLICE)):
                return None
            if time.monotonic() >= deadline:
                return None

    def _await_warm(self, poll: float) -> TrainerExit | None:
        """STARTING: up to a poll interval, ended early by the warm trainer's report or exit.

        Its first report is what this agent joins on, so it is looked for every `WAKE_SLICE`,
        not once a poll: the join comes within ~20 ms of the trainer being ready.
        """
        report = self._channel.timings_path(STANDBY_GENERATION)
        for _ in range(max(1, math.ceil(poll / WAKE_SLICE))):
            ended = self._trainer.wait(WAKE_SLICE)
            if ended is not None or report.exists() or self._signalled():
                return ended
        return None

    def _cannot_drain(self, s: State, timings: Timings | None, now: float) -> bool:
        """The trainer can no longer reach a step boundary.

        Frozen, or no step since before the decision for the stall bound (its collective
        waits for a peer that is gone).
        """
        decided = s.decided
        assert decided is not None
        in_loop = s.running is not None and in_training_loop(s.handed, timings)
        if self._watchdog.frozen_for(now, in_loop):
            return True
        stall = self._watchdog.stall_seconds
        stuck = self._watchdog.stood_still_since(decided) < decided
        return bool(stall) and stuck and now - decided > stall

    # -- acting ---------------------------------------------------------------------------------

    def _execute(self, action: Action) -> None:
        match action:
            case Log(level, message):
                log.log(level, "%s", message)
            case StartWarm():
                self._watchdog.reset()
                start_warm(self._trainer, self._channel.directory, self._backend)
            case StartTrainer(world):
                self._channel.clear()
                self._watchdog.reset()
                self._rescale.restarted(world.generation, self._wall())
                self._trainer.start(trainer_world(world, self._key, self._backend))
            case HandTo(world):
                self._hand_over(world, world.generation)
                self._trainer.update_world(trainer_world(world, self._key, self._backend))
            case HandOver(world, generation):
                self._hand_over(world, generation)
            case Terminate():
                self._trainer.forward_signal(signal.SIGTERM)
            case Kill():
                self._trainer.kill()
            case Join():
                self._membership.join()
            case Leave():
                self._membership.leave()
            case Tick():
                self._membership.tick()
            case LearnFramework(name):
                if name != self._trainer.framework.name:
                    self._trainer.framework = frameworks.get(name)
                    log.info("the trainer trains with %s", name)
            case OpenRescale(world, why, decided, from_generation, stalled, noticed):
                still = self._watchdog.stood_still_since(decided)
                self._rescale.begin(
                    from_generation,
                    world.generation,
                    why,
                    decided,
                    min(stalled or decided, still),
                    noticed,
                )
            case MarkDrained(at):
                self._rescale.drained(at)
            case Stepped(generation, timings):
                record = self._rescale.stepped(generation, timings, self._channel.timings)
                self._record([] if record is None else [record])
            case RequestGeneration(reason):
                self._membership.request_generation(reason)
            case Fail(message):
                raise RendezvousTimeout(message)
            case RecordFinish(step, late):
                self._record_finish(step, late)
            case TryFinish(step):
                self._membership.finish(step)
            case RecordFailure(status):
                tail = kept_tail(self._trainer.log_tail())
                failure = TrainerFailure(self._membership.me.id, status, self._wall(), tail)
                self._membership.record_failure(failure, self._failures)

    def _record(self, records: list[RescaleRecord]) -> None:
        """Counts and logs finished rescales."""
        for record in records:
            self._rescales.record(record.pause, record.phases)
            log.info("%s", record.describe())
            when = rescale_text(self._wall(), record.generation)
            self._last_rescale = (when, "; ".join(record.reasons))

    def _report_status(self) -> None:
        """Rank 0 of the current world writes the job's status: one writer says one thing.

        A job over with no member left has no rank 0: whoever learns it writes it.
        """
        world = self._membership.world
        if world is None:
            return
        writer = world.rank_of(self._key) == 0 or (world.finished and not world.members)
        if not writer:
            return
        s = self._state
        stepping = (
            s.running is not None and s.initialised and s.running.generation == world.generation
        )
        phase = job_phase(world, s.phase.value, stepping)
        now = time.monotonic()
        due = self._status.due(phase, now)
        if not due and now < self._progress_read + PROGRESS_READ_SECONDS:
            return
        self._progress_read = now
        path = self._trainer.report_path
        report = read_report(path) if path is not None else None
        counters = report.counters if report is not None else None
        if report is not None and report.counters.progress is not None:
            at = report.counters.last_step_unix or report.updated_unix
            self._eta.observe(ProgressPoint(at, report.counters.progress))
        if not due:
            return
        wall = self._wall()
        status = JobStatus(
            phase,
            world_size=world.size,
            generation=world.generation,
            global_step=counters.global_step if counters is not None else None,
            progress=counters.progress if counters is not None else None,
            eta_seconds=self._eta.eta() if counters is not None else None,
            last_rescale=self._last_rescale[0],
            last_rescale_reason=self._last_rescale[1],
            failures=len(self._failures.recent(world.failures, wall)),
        )
        self._status.report(status, now, wall)

    def _hand_over(self, world: World | None, generation: int) -> None:
        """Writes the next world (None: leave) for the trainer, then asks it to drain."""
        mine = None if world is None else trainer_world(world, self._key, self._backend)
        self._channel.hand_over(NextWorld(generation, mine))

    def _record_finish(self, step: int | None, late: bool) -> None:
        """Marks the world record finished (ours, or one we read: its step wins), leaves."""
        known = self._membership.world
        if known is None or not known.finished:
            self._membership.finish(step)
            known = self._membership.world
        if known is not None and known.finished and known.finished_at_step is not None:
            step = known.finished_at_step  # the agreed step: the first writer's
        self._membership.leave()
        self._job_finished, self._finished_at_step = True, step
        failed = known is not None and known.failed
        self._job_failed = failed
        what = (
            f"job {self._job} {'already ' if late else ''}finished at step "
            f"{'?' if step is None else step}"
        )
        if failed:
            what = f"job {self._job} failed (its trainer failures exceeded the budget)"
        if self._rules.exit_when_finished:
            log.info("%s; exiting", what)
        else:
            log.info("%s; idling (no trainer; /metrics and /readyz stay up until SIGTERM)", what)
        finished, failed_hook = self._on_job_finished, self._on_job_failed
        self._on_job_finished = self._on_job_failed = None  # once
        try:
            if failed and known is not None and failed_hook is not None:
                failed_hook(known.failures)
            elif not failed and finished is not None:
                finished(step)
        except ElasticError as e:
            log.error("%s", e)


def control_env(control_dir: Path, state_dir: Path, member: str) -> dict[str, str]:
    """What the elastic trainer API needs in its environment."""
    return {
        names.CONTROL_DIR: str(control_dir),
        names.STATE_DIR: str(state_dir),
        names.MEMBER: member,
        "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
    }
