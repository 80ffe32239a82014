"""Joining worlds: the first of `ElasticTrainer`'s three jobs (`agent.trainer.elastic`).

A trainer meets the ranks of the newest world it was handed (`agent.trainer.rendezvous`),
forms that world's collective through its framework's `Collective`, and agrees with them on
the step boundary where a rescale stops them. A newer world (or a stop, or the agent's death)
that comes while it still meets is followed at once: the meeting is in Python and gives up,
so a trainer still starting or re-initialising never has to be killed for a rescale. Each
milestone (imported, master, initialised, restored, first step, stopped, finished) is
reported to the agent over the control channel: that is how the agent measures a rescale.

Importing this module imports no framework.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import FrameType
from typing import Any

from agent.protocol.control import (
    RESCALE_EXIT,
    STANDBY_GENERATION,
    ControlChannel,
    NextWorld,
    Timings,
)
from agent.protocol.errors import RendezvousTimeout
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.errors import LeaveTraining, PeerLost
from agent.trainer.frameworks.base import Collective, Framework, ReduceOp
from agent.trainer.rendezvous import RendezvousHost, Superseded, meet
from agent.trainer.session import TrainingSession
from agent.trainer.settings import ElasticTrainerSettings

log = logging.getLogger(__name__)

POLL_SECONDS = 0.02
"""How often a trainer waiting for its next world reads the control channel."""


class WorldJoiner:
    """This trainer's place in the worlds it lives through: joining, agreeing, reporting."""

    def __init__(
        self,
        session: TrainingSession,
        settings: ElasticTrainerSettings,
        framework: Framework,
        collective: Collective,
        channel: ControlChannel | None,
        on_adopt: Callable[[TrainerWorld], None] | None = None,
        started_at: float | None = None,
    ) -> None:
        """`on_adopt` is told of every world this trainer moves into (after its env is set)."""
        self.session = session
        self.settings = settings
        self.framework = framework
        self.collective = collective
        self.channel = channel
        self._on_adopt = on_adopt
        self.timings = Timings(started=started_at or time.time())
        self.in_process = False
        """True once the framework's self-test passed: rescales re-form the collective here."""
        self.stop_signal = False
        """SIGTERM arrived: stop at the next agreed boundary and leave."""
        self._hosts: dict[str, RendezvousHost] = {}  # master endpoint -> our rendezvous host
        self._parent = os.getppid()  # read now: once the agent is gone it is too late

    @property
    def world(self) -> TrainerWorld:
        """The world this trainer is in (or on its way into)."""
        return self.session.world

    @property
    def rank(self) -> int:
        """This trainer's rank in its world."""
        return self.session.world.rank

    @property
    def world_size(self) -> int:
        """Ranks in this trainer's world."""
        return self.session.world.world_size

    @property
    def generation(self) -> int:
        """The generation of this trainer's world."""
        return self.session.world.generation

    @property
    def reinit_mode(self) -> str:
        """``in-process`` or ``process``: how this trainer lives through a rescale."""
        return "in-process" if self.in_process else "process"

    def test_in_process(self) -> None:
        """Turns the in-process path on where ``EDL_REINIT=auto`` and the self-test passes."""
        if self.settings.reinit != "auto":
            return
        why_not = self.collective.self_test(self.world.backend or "gloo")
        self.in_process = why_not is None
        if why_not:
            log.info("in-process re-init off (%s): rescales restart the process", why_not)

    # -- joining --------------------------------------------------------------------------------

    def join(self) -> None:
        """Joins the newest world handed to us: meets its ranks, then forms the group.

        Raises:
            PeerLost, RendezvousTimeout: the world cannot be formed.
            LeaveTraining: told to stop, or no world to follow, while meeting.
        """
        while True:
            self.mark("imported")
            world = self.world
            try:
                store = self._meet(world)
                break
            except Superseded as e:
                log.info("%s", e)
                self._follow_newer_world()
        self.mark("master")
        formed = replace(world, master=store) if store else world
        self.guarded(
            self.collective.init, formed, self.in_process, self.settings.master_wait_seconds
        )
        if self.world_size > 1:
            # Guard against a mixed rendezvous (a stale trainer of another generation).
            gens = self.all_reduce([self.generation, -self.generation], ReduceOp.MAX)
            if gens != [self.generation, -self.generation]:
                raise PeerLost(f"ranks disagree on the generation: {gens}")
        self.mark("initialised")

    def _meet(self, world: TrainerWorld) -> str:
        """The fresh store endpoint of this generation's group ("" for a world of one)."""
        if self.superseded():  # a world of one meets nobody, but may be stale already
            raise Superseded(f"generation {world.generation}: a newer world came first")
        if world.world_size == 1 or not world.master:
            return ""
        host = None
        if world.rank == 0:
            host = self._hosts.get(world.master)
            if host is None:
                host = self._hosts[world.master] = self._host(world.master)
        return meet(
            world.master,
            world.generation,
            world.rank,
            world.world_size,
            self.settings.master_wait_seconds,
            self.superseded,
            host,
        )

    def _host(self, endpoint: str) -> RendezvousHost:
        """Listens on our master endpoint; the previous incarnation may still be releasing it."""
        deadline = time.monotonic() + self.settings.master_wait_seconds
        while True:
            try:
                return RendezvousHost(endpoint, store_ports=self.settings.store_ports)
            except OSError as e:
                if time.monotonic() >= deadline or self.superseded():
                    raise RendezvousTimeout(f"cannot listen on {endpoint}: {e}") from e
                time.sleep(0.1)

    def superseded(self) -> bool:
        """A stop, a newer world handed over, or the agent gone: stop waiting for this one."""
        if self.stop_signal or not self.agent_alive():
            return True
        return self.newer_world() is not None

    def agent_alive(self) -> bool:
        """The agent that started us still runs (its lease, or our parent process)."""
        lease = self.session.lease
        if lease is not None:
            return lease.alive
        return self.channel is None or os.getppid() == self._parent

    def newer_world(self) -> NextWorld | None:
        """The world handed over for a later generation than ours, if any."""
        handed = self.channel.next_world() if self.channel is not None else None
        return handed if handed is not None and handed.generation > self.generation else None

    def _follow_newer_world(self) -> None:
        """Adopts the newer world (waiting for it if need be), or leaves when told to."""
        if self.stop_signal:
            why = f"stopped before joining generation {self.generation}"
            raise LeaveTraining(RESCALE_EXIT, why)
        world = self.await_world()
        if world is None:
            raise LeaveTraining(
                RESCALE_EXIT, f"no world to join after generation {self.generation}"
            )
        self.adopt(world)

    def wait_as_standby(self) -> None:
        """Started warm before our agent joined: wait (as long as the agent lives) for a world.

        The framework is already imported by now, so the survivors never wait for our import.
        Returns at once unless this trainer is a stand-by of an elastic agent.
        """
        if self.generation != STANDBY_GENERATION or self.channel is None:
            return
        self.mark("imported")
        world = self.await_world(wait=float("inf"))
        if world is None:
            raise LeaveTraining(RESCALE_EXIT, "told to leave before joining a world")
        self.adopt(world, fresh_timings=False)

    def await_world(self, wait: float | None = None) -> TrainerWorld | None:
        """The next world handed over (None: leave, none within `wait`, or the agent gone)."""
        if self.channel is None:
            return None
        wait = self.settings.reinit_wait_seconds if wait is None else wait
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self.agent_alive():
            handed = self.newer_world()
            if handed is not None:
                return handed.world  # None: leave
            time.sleep(POLL_SECONDS)
        log.error("no next world within %.0f s (or the agent is gone)", wait)
        return None

    def adopt(self, world: TrainerWorld, fresh_timings: bool = True) -> None:
        """Moves into `world` (not yet formed); its timings start now unless told otherwise."""
        os.environ.update(self.framework.launch_env(world))  # for code that reads the env
        self.session.world = world
        if fresh_timings:
            now = time.time()
            self.timings = Timings(started=now, imported=now)
        if self._on_adopt is not None:
            self._on_adopt(world)

    # -- the collective -------------------------------------------------------------------------

    def guarded(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, a collective call: any failure of it is `PeerLost`."""
        try:
            return fn(*args)
        except Exception as e:
            raise PeerLost(f"collective failed in generation {self.generation}: {e}") from e

    def all_reduce(self, values: Sequence[int], op: ReduceOp) -> list[int]:
        """Element-wise `op` of `values` over every rank of this world."""
        result: list[int] = self.guarded(self.collective.all_reduce_ints, list(values), op)
        return result

    def broadcast_bytes(self, blob: bytes, src: int) -> bytes:
        """Rank `src`'s `blob` on every rank of this world."""
        received: bytes = self.guarded(self.collective.broadcast_bytes, blob, src)
        return received

    # -- agreed stops ---------------------------------------------------------------------------

    def drain_requested(self) -> bool:
        """True once the agent asked this trainer to stop (or it got SIGTERM)."""
        if self.stop_signal:
            return True
        return self.channel is not None and self.channel.drain_requested(self.generation)

    def stop_agreed(self) -> bool:
        """Whether any rank was asked to stop: every rank then stops at this boundary."""
        local = self.drain_requested()
        if self.world_size == 1:
            return local
        (flag,) = self.all_reduce([1 if local else 0], ReduceOp.MAX)
        return flag > 0

    def leaving(self) -> bool:
        """This trainer stops for good: SIGTERM, or the next world handed over is "leave"."""
        handed = self.newer_world()
        return self.stop_signal or (handed is not None and handed.world is None)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """The SIGTERM handler: stop at the next agreed step boundary."""
        self.stop_signal = True

    # -- reporting ------------------------------------------------------------------------------

    def mark(self, milestone: str, **values: float | int) -> None:
        """Reports reaching `milestone` now (with `values`) to the agent."""
        reached: dict[str, Any] = {milestone: time.time(), **values}
        self.timings = replace(
            self.timings,
            rank=self.rank,
            reinit=self.reinit_mode,
            framework=self.framework.name,
            **reached,
        )
        if self.channel is None:
            return
        try:
            self.channel.report(self.generation, self.timings)
        except OSError as e:
            log.warning("cannot report timings to %s: %s", self.channel.directory, e)

    def mark_stopped(self, last_step_end: float | None) -> None:
        """Reports when training stood still in this world: the end of its last step.

        Reported only once a step was trained here (`last_step_end`): a world left before its
        first step has no pause of its own; the rescale record runs through it.
        """
        if last_step_end is not None and self.timings.stopped is None:
            self.mark("stopped", stopped=last_step_end)
