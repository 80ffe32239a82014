"""The elastic agent loop: keep the trainer running in the current world, across generations.

It drives the foundation's `TrainerSupervisor` (one process per incarnation) from the world
that `Membership` agrees on. A new generation asks the running trainer to stop at a step
boundary (the trainers agree on which), waits for it within a bound, and starts the next
incarnation in the new world (written in its framework's variables: the framework the warm
trainer reported using); survivors then hand their state to joiners. Everything said to and
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
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import psutil

from agent.elastic.errors import RendezvousTimeout
from agent.elastic.membership import Membership
from agent.elastic.pause import OpenRescale, change
from agent.elastic.watchdog import Progress, StallWatchdog
from agent.elastic.world import World
from agent.protocol import env as names
from agent.protocol.control import (
    PEER_LOST_EXIT,
    RESCALE_EXIT,
    STANDBY_GENERATION,
    ControlChannel,
    NextWorld,
    Timings,
)
from agent.protocol.world import TrainerWorld
from agent.reports import read_report
from agent.rescales import RescaleLog
from agent.supervisor import TrainerExit, TrainerSupervisor
from agent.trainer import frameworks

log = logging.getLogger(__name__)

ON_FINISHED = ("idle", "exit")
"""What an agent does once the job is finished: stay up until SIGTERM, or exit 0 at once."""
IDLE_READ_SECONDS = 1.0
"""How often an idle agent (job finished) reads the store: it only keeps the mark intact."""


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    return float(raw) if raw else default


def default_backend() -> str:
    """`nccl` when this machine has an NVIDIA device, else `gloo` (CPU)."""
    return "nccl" if Path("/dev/nvidia0").exists() else "gloo"


@dataclass(frozen=True)
class ElasticSettings:
    """Timeouts of the rescale phases. Every field has an ``EDL_`` environment variable."""

    drain_timeout: float = 30.0
    """EDL_DRAIN_TIMEOUT: a trainer asked to stop gets this long to reach a step boundary."""
    init_timeout: float = 120.0
    """EDL_INIT_TIMEOUT: a new trainer must have joined its collective within this long."""
    regroup_timeout: float = 20.0
    """EDL_REGROUP_TIMEOUT: after a broken collective, wait this long for a membership change
    before forcing a fresh generation of the same members."""
    max_resets: int = 5
    """EDL_MAX_RESETS: forced generations in a row without a completed step before giving up."""
    stall_timeout: float = 10.0
    """EDL_STALL_TIMEOUT: a trainer stopped (SIGSTOP) this long, or in its training loop
    without refreshing its report for three times this long, stands still: it is killed and
    this member leaves the job (`StallWatchdog`). 0 disables."""
    backend: str = ""
    """EDL_DISTRI_BACKEND: `gloo` or `nccl`; empty picks by the presence of a GPU."""
    on_finished: str = "idle"
    """EDL_ON_FINISHED (--on-finished): once the job is finished, `idle` until SIGTERM (a
    Deployment must not restart the container) or `exit` 0 at once (a Job, a local run)."""

    def __post_init__(self) -> None:
        if self.on_finished not in ON_FINISHED:
            raise ValueError(f"on_finished {self.on_finished!r}: expected idle or exit")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ElasticSettings:
        """Settings from ``EDL_*`` variables."""
        return cls(
            drain_timeout=_env_float(env, "EDL_DRAIN_TIMEOUT", cls.drain_timeout),
            init_timeout=_env_float(env, "EDL_INIT_TIMEOUT", cls.init_timeout),
            regroup_timeout=_env_float(env, "EDL_REGROUP_TIMEOUT", cls.regroup_timeout),
            max_resets=int(_env_float(env, "EDL_MAX_RESETS", cls.max_resets)),
            stall_timeout=_env_float(env, "EDL_STALL_TIMEOUT", cls.stall_timeout),
            backend=env.get("EDL_DISTRI_BACKEND", "").strip(),
            on_finished=env.get("EDL_ON_FINISHED", "").strip() or cls.on_finished,
        )


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
    """Runs one pod's trainer through every generation until the job ends or we leave."""

    def __init__(
        self,
        membership: Membership,
        trainer: TrainerSupervisor,
        control_dir: Path,
        rescales: RescaleLog,
        settings: ElasticSettings,
        wall_clock: Callable[[], float] = time.time,
        job: str = "",
        watchdog: StallWatchdog | None = None,
        finished_elsewhere: Callable[[], int | None] | None = None,
    ) -> None:
        self._membership = membership
        self._finished_elsewhere = finished_elsewhere
        """The step at which another record (the newest durable checkpoint) says the job
        finished, or None: checked at start, when the world record does not say it."""
        self._job = job or "(unnamed)"
        self._trainer = trainer
        self._channel = ControlChannel(control_dir)
        self._rescales = rescales
        self._settings = settings
        self._backend = settings.backend or default_backend()
        self._wall = wall_clock
        self._watchdog = watchdog or StallWatchdog(settings.stall_timeout, flush_seconds=1.0)
        self._key = membership.me.key
        self._running: World | None = None  # the world of the live trainer
        self._started_gen = -1
        self._open: OpenRescale | None = None  # the rescale this member is living through
        self._trained = False  # our trainer has stepped in some world: later changes are rescales
        self._handed: tuple[int, float] | None = None  # (generation, when) handed to a live trainer
        self._forming: list[World] = []  # worlds a handed-over trainer may still be forming
        self._noticed: float | None = None
        self._spawned_at = 0.0
        self._initialised = False
        self._resets = 0
        self._stop_signal: int | None = None
        self._stopped_by_us = False
        self._standby = False  # a warm trainer waits for our first world
        self._initialised_gen = -1  # newest generation our trainer joined the collective of
        self._trainer_mode = "process"  # what the running trainer reported it can do
        self._deadline = float("inf")
        self._job_finished = False
        self._finished_at_step: int | None = None

    @property
    def job_finished(self) -> bool:
        """True once this agent knows the job is done (it then never starts a trainer)."""
        return self._job_finished

    @property
    def finished_at_step(self) -> int | None:
        """The global step the job finished at, when known."""
        return self._finished_at_step

    def request_stop(self, signum: int, frame: FrameType | None = None) -> None:
        """Signal handler: leave the job cleanly (pod deletion, Ctrl-C)."""
        self._stop_signal = signum

    def run(self, max_seconds: float = float("inf")) -> int:
        """Blocks until the job ends (trainer exit 0), we leave, or a failure; returns a status."""
        self._channel.directory.mkdir(parents=True, exist_ok=True)
        self._deadline = deadline = time.monotonic() + max_seconds
        world = self._membership.peek()
        if world is not None and world.finished:
            return self._job_done(world.finished_at_step, late=True)
        step = self._finished_elsewhere() if self._finished_elsewhere is not None else None
        if step is not None:
            log.info("the newest checkpoint says job %s finished at step %d", self._job, step)
            return self._job_done(step, late=True)
        status = self._start_standby()
        if status is not None:
            return status
        self._membership.join()
        poll = self._membership.settings.poll_interval
        while time.monotonic() < deadline:
            world = self._membership.tick()
            if self._stop_signal is not None:
                return self._leave(f"signal {signal.Signals(self._stop_signal).name}")
            status = self._step(world)
            if status is not None:
                return status
            time.sleep(poll)
        return self._leave("time limit reached")

    # -- one round ------------------------------------------------------------------------------

    def _start_standby(self) -> int | None:
        """Starts the trainer warm and joins only once it has imported Paddle.

        Survivors then never wait for our process start and import (seconds) during a
        scale-up: the new generation is decided when we can train at once.
        """
        self._channel.clear()
        self._watchdog.reset()
        self._trainer.start(TrainerWorld(generation=STANDBY_GENERATION, backend=self._backend))
        self._standby = True
        deadline = time.monotonic() + self._settings.init_timeout
        while time.monotonic() < deadline and self._stop_signal is None:
            ready = self._channel.timings(STANDBY_GENERATION)
            if ready is not None:
                self._learn_framework(ready)
                return None
            ended = self._trainer.wait(0.05)
            if ended is not None:
                log.error("%s before joining the job", ended.describe())
                return ended.status or 1
        if self._stop_signal is not None:
            return self._leave(f"signal {signal.Signals(self._stop_signal).name}")
        log.error("the trainer was not ready within %.0f s", self._settings.init_timeout)
        self._stop_trainer()
        return 1

    def _step(self, world: World | None) -> int | None:
        if self._standby:
            ended = self._trainer.wait(0)
            if ended is not None:
                self._standby = False
                log.error("%s while waiting for a world: leaving the job", ended.describe())
                self._membership.leave()
                return ended.status or 1
            if world is not None and world.finished:
                self._stop_standby()
                return self._job_done(world.finished_at_step, late=True)
            if world is None or world.paused or world.rank_of(self._key) is None:
                return None
            self._standby = False
            self._hand_to_live(world, self._wall())
            return None
        if self._running is not None:
            ended = self._trainer.wait(0)
            if ended is None and world is not None and world.finished:
                # Our trainer is most likely finishing too; give it the drain bound to say so.
                ended = self._wait_trainer(self._settings.drain_timeout)
                if ended is None:
                    log.warning("the job is finished but the trainer still runs; stopping it")
                    self._stop_trainer()
                    self._running = None
                    return self._job_done(world.finished_at_step, late=True)
            if ended is None:
                return self._watch_running(world)
            status = self._on_exit(ended)
            if status is not None:
                return status
            world = self._membership.world  # _on_exit may have waited for a newer one
        if world is not None and world.finished:
            return self._job_done(world.finished_at_step, late=True)
        if world is None or world.paused or world.rank_of(self._key) is None:
            return None
        if world.generation > self._started_gen:
            self._start(world)
        return None

    def _watch_running(self, world: World | None) -> int | None:
        running = self._running
        assert running is not None
        self._collect_timings()
        if self._running is None:
            return None  # it had to be stopped; the next round sees the exit
        now = self._wall()
        frozen = self._watchdog.frozen_for(now, self._in_training_loop(running.generation))
        if frozen:
            return self._exclude(frozen)
        if self._noticed is None and self._membership.pending_for() > 0:
            self._noticed = now - self._membership.pending_for()
        if world is not None and world.generation != running.generation:
            self._drain(world, now)
            return None
        if not self._initialised and now - self._spawned_at > self._settings.init_timeout:
            error = RendezvousTimeout(
                f"generation {running.generation} did not form within "
                f"{self._settings.init_timeout:.0f} s"
            )
            log.error("%s; stopping the trainer", error)
            self._stop_trainer()
            # the next round sees the exit and regroups
        return None

    def _drain(self, world: World, now: float) -> None:
        """A new generation while our trainer runs: hand it over, or stop it at a boundary.

        A trainer that re-initialises in-process, or that has not joined its world yet (still
        starting, or meeting its peers), is handed the new world and keeps running: it moves
        there itself. Any other is waited for at its next step boundary (it exits 75) and
        restarted by the next round.
        """
        running = self._running
        assert running is not None
        member = world.rank_of(self._key) is not None
        self._open_rescale(world, change(running, world), now)
        if member and (not self._initialised or self._trainer_mode == "in-process"):
            log.info(
                "generation %d -> %d: %s",
                running.generation,
                world.generation,
                "asking the trainer to stop at a step boundary and re-initialise in-process"
                if self._initialised
                else "handing the new world to the trainer (it has not joined its world yet)",
            )
            self._hand_to_live(world, now)
            return
        log.info(
            "generation %d -> %d: asking the trainer to stop at a step boundary",
            running.generation,
            world.generation,
        )
        self._hand_over(world if member else None, world.generation)
        ended = self._wait_trainer(self._settings.drain_timeout, decided=now)
        if ended is None:
            log.error(
                "trainer did not reach a step boundary within %.0f s; killing it",
                self._wall() - now,
            )
            self._stop_trainer()
        if self._open is not None:
            self._open.drained = self._wall()

    def _hand_to_live(self, world: World, now: float) -> None:
        """The running trainer (or warm stand-by) moves itself into `world`."""
        if self._running is not None and not self._initialised:
            self._forming.append(self._running)  # it may be inside its framework's formation
        self._hand_over(world, world.generation)
        self._trainer.update_world(trainer_world(world, self._key, self._backend))
        self._running = world
        self._started_gen = world.generation
        self._spawned_at = now
        self._handed = (world.generation, now)
        self._initialised = False
        self._noticed = None

    def _open_rescale(self, world: World, why: str, decided: float, stalled: float = 0.0) -> None:
        """Starts (or extends) the record of this member's rescale, if it is a survivor."""
        if not self._trained or world.rank_of(self._key) is None:
            return  # a joiner's first world is not a rescale for it, nor one it is not in
        if self._open is not None:
            self._open.supersede(world.generation, why, decided)
            return
        running = self._running
        self._open = OpenRescale(
            from_generation=running.generation if running is not None else world.generation - 1,
            generation=world.generation,
            stalled=min(stalled or decided, self._watchdog.stood_still_since(decided)),
            noticed=self._noticed or decided,
            decided=decided,
            reasons=[why],
        )

    def _hand_over(self, world: World | None, generation: int) -> None:
        """Writes the next world (None: leave) for the trainer, then asks it to drain."""
        mine = None if world is None else trainer_world(world, self._key, self._backend)
        self._channel.hand_over(NextWorld(generation, mine))

    def _learn_framework(self, timings: Timings) -> None:
        """Later trainers start in the variables of the framework this one reported using."""
        if timings.framework and timings.framework != self._trainer.framework.name:
            self._trainer.framework = frameworks.get(timings.framework)
            log.info("the trainer trains with %s", timings.framework)

    def _on_exit(self, ended: TrainerExit) -> int | None:
        running = self._running
        assert running is not None
        self._collect_timings()
        self._running = None
        self._handed = None
        status = ended.status
        if status == 0:
            log.info("trainer finished: the job is done")
            return self._job_done(self._reported_step(running.generation))
        requested = self._open is not None and self._open.generation > running.generation
        ours, self._stopped_by_us = self._stopped_by_us, False
        if status in (RESCALE_EXIT, PEER_LOST_EXIT) or requested or ours:
            if self._initialised_gen < running.generation:
                # It never joined its current world: start afresh in the newest one, without
                # forcing a generation (the others may well be waiting for us in it).
                self._started_gen = self._initialised_gen
            elif not requested:
                self._regroup(running, status)
            return None
        log.error("%s: leaving the job (a crash counts as a scale-down)", ended.describe())
        self._membership.leave()
        return status

    def _regroup(self, running: World, status: int) -> None:
        """The collective broke (or a peer drained) without a new world yet: wait, then force."""
        noticed = self._wall()
        stalled = self._watchdog.stood_still_since(noticed)
        why = "stopped for a rescale" if status == RESCALE_EXIT else "lost a peer"
        log.warning("generation %d: trainer %s; waiting for the new world", running.generation, why)
        deadline = time.monotonic() + self._settings.regroup_timeout
        poll = self._membership.settings.poll_interval
        self._noticed = noticed
        while time.monotonic() < deadline and self._stop_signal is None:
            world = self._membership.tick()
            if world is not None and world.generation > running.generation:
                # The trainer was gone before the decision: waiting was detection, not drain.
                now = self._wall()
                self._open_rescale(world, f"{why}, {change(running, world)}", now, stalled)
                if self._open is not None:
                    self._open.drained = now
                return
            time.sleep(poll)
        if self._stop_signal is not None:
            return
        self._resets += 1
        if self._resets > self._settings.max_resets:
            raise RendezvousTimeout(f"{self._resets - 1} forced generations without progress")
        self._membership.request_generation(f"collective of generation {running.generation} broke")
        now = self._wall()
        forced = World(running.generation + 1, running.members)
        self._open_rescale(forced, f"{why}, forced a generation", now, stalled)
        if self._open is not None:
            self._open.drained = now

    def _start(self, world: World) -> None:
        self._trainer_mode = "process"  # until the new trainer reports what it can do
        self._channel.clear()
        self._watchdog.reset()
        if self._open is not None:
            if self._open.drained == 0.0:
                self._open.drained = self._wall()
            self._open.supersede(world.generation, "")
        self._trainer.start(trainer_world(world, self._key, self._backend))
        self._running = world
        self._started_gen = world.generation
        self._spawned_at = self._wall()
        self._initialised = False
        self._noticed = None
        if self._open is not None:
            self._open.restarted = True
            self._open.spawned = self._spawned_at

    def _wait_trainer(self, timeout: float, decided: float | None = None) -> TrainerExit | None:
        """Waits for the trainer to end while still renewing our membership.

        With `decided` (a drain), it stops waiting early for a trainer that can no longer
        reach a step boundary: frozen, or no step since before the decision for the stall
        bound (its collective waits for a peer that is gone).
        """
        deadline = time.monotonic() + timeout
        poll = self._membership.settings.poll_interval
        while True:
            ended = self._trainer.wait(min(poll, max(0.0, deadline - time.monotonic())))
            if ended is not None or time.monotonic() >= deadline:
                return ended
            self._membership.tick()
            if decided is not None and self._cannot_drain(decided):
                return None

    def _cannot_drain(self, decided: float) -> bool:
        self._observe()
        now, stall = self._wall(), self._watchdog.stall_seconds
        running = self._running
        in_loop = running is not None and self._in_training_loop(running.generation)
        if self._watchdog.frozen_for(now, in_loop):
            return True
        stuck = self._watchdog.stood_still_since(decided) < decided
        return bool(stall) and stuck and now - decided > stall

    def _stop_trainer(self, grace: float = 5.0) -> TrainerExit | None:
        """SIGTERM, then SIGKILL: the trainer was ours to stop, so this is not a crash."""
        self._stopped_by_us = True
        self._trainer.forward_signal(signal.SIGTERM)
        ended = self._wait_trainer(grace)
        if ended is None:
            self._trainer.kill()
            ended = self._wait_trainer(grace)
        return ended

    def _exclude(self, frozen: float) -> int:
        """Our trainer stands still (its report went stale): kill it and leave the job.

        Its peers' collective then fails at once (the process is gone) instead of timing
        out, and they go on without this member; on Kubernetes the container restarts and
        rejoins as a new member.
        """
        log.error(
            "trainer stood still for %.0f s (stopped, or frozen without refreshing its "
            "report); killing it and leaving the job",
            frozen,
        )
        self._trainer.kill()
        self._wait_trainer(5.0)
        self._running = None
        self._membership.leave()
        return 1

    # -- the job is done -------------------------------------------------------------------------

    def _reported_step(self, generation: int) -> int | None:
        """The step the trainer said it finished at (None when it did not say)."""
        timings = self._channel.timings(generation)
        return None if timings is None else timings.finished_step

    def _job_done(self, step: int | None, late: bool = False) -> int:
        """Records the finish (ours, or one we read), leaves, then exits 0 or idles."""
        known = self._membership.world
        recorded = known is not None and known.finished
        if not recorded:
            recorded = self._membership.finish(step)
            known = self._membership.world
        if known is not None and known.finished and known.finished_at_step is not None:
            step = known.finished_at_step  # the agreed step: the first writer's
        self._membership.leave()
        self._job_finished, self._finished_at_step = True, step
        what = (
            f"job {self._job} {'already ' if late else ''}finished at step "
            f"{'?' if step is None else step}"
        )
        if self._settings.on_finished == "exit":
            deadline = time.monotonic() + self._membership.settings.ttl
            while not recorded and time.monotonic() < deadline and self._stop_signal is None:
                time.sleep(self._membership.settings.poll_interval)
                recorded = self._membership.finish(step)
            if not recorded:
                log.warning("could not mark the job finished in the membership store")
            log.info("%s; exiting", what)
            return 0
        log.info("%s; idling (no trainer; /metrics and /readyz stay up until SIGTERM)", what)
        poll = self._membership.settings.poll_interval
        next_read = time.monotonic() + IDLE_READ_SECONDS
        while self._stop_signal is None and time.monotonic() < self._deadline:
            if time.monotonic() >= next_read:
                next_read = time.monotonic() + IDLE_READ_SECONDS
                if recorded:
                    self._membership.tick()  # repairs a mangled record as a finished one
                else:
                    recorded = self._membership.finish(step)
            time.sleep(poll)
        why = "time limit reached"
        if self._stop_signal is not None:
            why = f"signal {signal.Signals(self._stop_signal).name}"
        log.info("%s: exiting (the job was finished)", why)
        return 0

    # -- measuring ------------------------------------------------------------------------------

    def _observe(self) -> None:
        """Feeds the watchdog the current incarnation's report and process state."""
        path = self._trainer.report_path
        report = read_report(path) if path is not None else None
        if report is not None:
            c = report.counters
            mean = c.step_seconds_sum / c.steps if c.steps else 0.0
            progress = Progress(report.updated_unix, c.last_step_unix, c.steps, mean)
            self._watchdog.observe(progress)
        pid = self._trainer.pid
        try:
            stopped = pid is not None and psutil.Process(pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            stopped = False
        self._watchdog.observe_state(stopped, self._wall())

    def _cannot_form(self, handed: World) -> tuple[int, str] | None:
        """(generation, who left) when the trainer forms a world that lost a member since.

        That formation blocks in C++ until a timeout, so waiting for the trainer to take
        `handed` is pointless; a world that only grew still forms, so it is waited for.
        """
        for world in self._forming:
            t = self._channel.timings(world.generation)
            if t is None or t.master is None or t.initialised is not None:
                continue
            left = {m.key for m in world.members} - {m.key for m in handed.members}
            if left:
                ids = sorted(m.id for m in world.members if m.key in left)
                return world.generation, ", ".join(ids)
        return None

    def _in_training_loop(self, generation: int) -> bool:
        """The trainer steps in `generation` (not starting, re-forming, or finishing).

        Only there does a stale report mean it stands still: a framework may hold the
        interpreter lock while it forms a group, and a finished trainer's report is closed.
        """
        if self._handed is not None:
            return False
        timings = self._channel.timings(generation)
        return timings is not None and timings.first_step is not None and not timings.finished

    def _collect_timings(self) -> None:
        running = self._running
        if running is None:
            return
        self._observe()
        reported = self._channel.timings(running.generation)
        times = reported or Timings()
        if reported is not None:
            self._trainer_mode = reported.reinit
            self._learn_framework(reported)
        handed = self._handed
        if handed is not None and (times.started or times.imported) is not None:
            self._handed, self._forming = None, []  # the trainer took the world it was handed
        elif handed is not None and (gone := self._cannot_form(running)):
            log.warning(
                "the trainer is forming generation %d, which cannot form any more (%s left); "
                "restarting it in generation %d",
                gone[0],
                gone[1],
                running.generation,
            )
            self._handed, self._forming = None, []
            self._stop_trainer(grace=1.0)  # it saved its state before re-forming, if it had any
            return
        elif handed is not None and self._wall() - handed[1] > self._settings.drain_timeout:
            log.error(
                "trainer did not take generation %d within %.0f s; stopping it",
                handed[0],
                self._settings.drain_timeout,
            )
            self._handed, self._forming = None, []
            self._stop_trainer(grace=1.0)  # it saved its state before re-forming, if it had any
            return
        if times.initialised is not None:
            self._initialised = True
            self._initialised_gen = running.generation
        for g in range(self._open.from_generation + 1, self._open.generation) if self._open else ():
            passed = self._channel.timings(g)  # a world it stepped in on its way to a newer one
            if self._open is not None and passed is not None and passed.first_step is not None:
                record, self._open = self._open.split(g, passed)
                self._rescales.record(record.pause, record.phases)
                log.info("%s", record.describe())
        if times.first_step is not None:
            self._resets = 0
            self._trained = True
            rescale = self._open
            if rescale is not None and running.generation >= rescale.generation:
                record = rescale.close(running.generation, times)
                self._rescales.record(record.pause, record.phases)
                log.info("%s", record.describe())
                self._open = None

    # -- leaving --------------------------------------------------------------------------------

    def _stop_standby(self) -> None:
        """Tells the warm trainer to go (it never joined a world), within the drain bound."""
        self._hand_over(None, STANDBY_GENERATION + 1)
        if self._wait_trainer(self._settings.drain_timeout) is None:
            self._stop_trainer()
        self._standby = False

    def _leave(self, why: str) -> int:
        log.info("%s: leaving the job", why)
        self._membership.leave()
        if self._standby:
            self._stop_standby()
            return 0
        if self._running is None:
            return 0
        known = self._membership.world
        self._hand_over(None, max(self._running.generation, known.generation if known else 0) + 1)
        asked = self._wall()
        ended = self._wait_trainer(self._settings.drain_timeout, decided=asked)
        if ended is None:
            log.error("trainer did not stop within %.0f s; killing it", self._wall() - asked)
            ended = self._stop_trainer()
        self._running = None
        if ended is None or ended.status in (0, RESCALE_EXIT, PEER_LOST_EXIT):
            return 0
        if not self._initialised:
            # It had not joined its world (still starting, or re-forming in-process with its
            # state saved first): stopping it lost nothing, so this is a clean leave.
            return 0
        return ended.status


def control_env(control_dir: Path, state_dir: Path, member: str) -> dict[str, str]:
    """What the elastic trainer API needs in its environment."""
    return {
        names.CONTROL_DIR: str(control_dir),
        names.STATE_DIR: str(state_dir),
        names.MEMBER: member,
        "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
    }
