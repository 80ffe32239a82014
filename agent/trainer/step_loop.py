"""The step loop: the second of `ElasticTrainer`'s three jobs (`agent.trainer.elastic`).

Each step is the next global batch of the sampler, split across the current world. Around the
script's work on it the loop records the step (`agent.trainer.recording`), logs its sample ids
before any gradient is computed (the test-mode ledger), commits it (the sampler moves, the
global step grows), writes a due checkpoint, and asks every rank whether a stop was requested:
a stop agreed by all ranks ends the world at this boundary (`rescale`, the trainer's). A step
gate (tests) holds every rank at a boundary, still answering rescales.

Importing this module imports no framework.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.handoff import StateHandoff, WorldLink
from agent.trainer.ledger import SampleLedger
from agent.trainer.recording import StepRecorder
from agent.trainer.sampler import StepPlan
from agent.trainer.step_gate import StepGate

log = logging.getLogger(__name__)


class LoopWorld(WorldLink, Protocol):
    """What the loop needs of the world it steps in, besides the hand-off's (`WorldJoiner`)."""

    def drain_requested(self) -> bool:
        """This rank was asked to stop."""
        ...

    def stop_agreed(self) -> bool:
        """Some rank was asked to stop (every rank gets the same answer)."""
        ...

    def mark(self, milestone: str, **values: float | int) -> None:
        """Reports a milestone to the agent."""
        ...


class StepLoop:
    """Steps of the current world, and the boundaries between them."""

    def __init__(
        self,
        world: LoopWorld,
        handoff: StateHandoff,
        recorder: StepRecorder,
        rescale: Callable[[], None],
        gate: StepGate | None = None,
    ) -> None:
        """The loop of `world`, over the state `handoff` keeps.

        `rescale` ends the world at an agreed boundary (it returns in the next world, or
        never); `gate` holds every step when the script's own call passes none.
        """
        self.world = world
        self.handoff = handoff
        self.recorder = recorder
        self.gate = gate
        self._rescale = rescale
        self.ledger: SampleLedger | None = None
        """The test-mode sample ledger of this world (None: not recording)."""
        self.current: StepPlan | None = None
        """The step the script is training (None between steps)."""
        self.last_step_end: float | None = None
        """Wall time the last step in this world ended (None: none yet)."""
        self._first_step_reported = False
        self._step_end_hooks: list[Callable[[], None]] = []

    @property
    def share(self) -> float:
        """This rank's part of the current step's global batch (1 between steps)."""
        current = self.current
        return 1.0 if current is None else current.share

    def on_step_end(self, hook: Callable[[], None]) -> None:
        """Calls `hook` at the end of every step, before it is recorded (training thread)."""
        self._step_end_hooks.append(hook)

    def enter_world(self, ledger: SampleLedger | None) -> None:
        """A new world begins: nothing trained in it yet; its ledger is `ledger`."""
        if self.ledger is not None:
            self.ledger.close()
        self.ledger = ledger
        self._first_step_reported = False
        self.last_step_end = None

    def close(self) -> None:
        """Closes the ledger."""
        if self.ledger is not None:
            self.ledger.close()
            self.ledger = None

    def steps(self, gate: StepGate | None = None, epoch: int | None = None) -> Iterator[StepPlan]:
        """Yields this rank's part of each step; stops at an agreed boundary on a rescale.

        With `epoch`, only that epoch's steps (the loop ends with its last one). A `gate`
        (else the loop's) holds every rank at the boundary while it allows no more steps.
        """
        sampler = self.handoff.sampler
        handoff, world, recorder = self.handoff, self.world, self.recorder
        gate = gate or self.gate
        while (plan := sampler.plan(world.rank, world.world_size)) is not None:
            if epoch is not None and plan.epoch != epoch:
                return
            if gate is not None and self._held_at(gate):
                self._rescale()
                continue  # the plan again, in the new world
            if self.ledger is not None:
                self.ledger.intent(handoff.global_step, plan.epoch, plan.indices.tolist())
            self.current = plan
            recorder.begin_step()
            yield plan
            for hook in self._step_end_hooks:
                hook()
            recorder.end_step(samples=len(plan.indices))
            self.current = None
            sampler.advance(plan)
            handoff.global_step += 1
            recorder.progress, recorder.global_step = sampler.progress, handoff.global_step
            self.last_step_end = time.time()
            if not self._first_step_reported:
                world.mark("first_step")
                self._first_step_reported = True
                handoff.copy_behind()
            handoff.checkpoint_if_due()
            if world.stop_agreed():
                self._rescale()
            handoff.save_if_due()

    def _held_at(self, gate: StepGate) -> bool:
        """Waits while `gate` allows no more steps; True when a rescale was agreed meanwhile.

        The ranks agree on each round (the highest drain flag, the lowest allowance), so they
        all leave the wait at the same boundary, as `stop_agreed` does.
        """
        world = self.world
        deadline = time.monotonic() + gate.max_wait_seconds
        rounds = int(gate.max_wait_seconds / gate.poll_seconds) + 1
        for _ in range(rounds):
            drain = 1 if world.drain_requested() else 0
            allowed, expired = gate.allowed(), 1 if time.monotonic() >= deadline else 0
            if world.world_size > 1:
                drain, negated, expired = world.all_reduce([drain, -allowed, expired], ReduceOp.MAX)
                allowed = -negated
            if drain:
                return True
            if self.handoff.global_step < allowed:
                return False
            if expired:
                break
            time.sleep(gate.poll_seconds)
        log.warning(
            "step gate %s held step %d too long; opening it", gate.path, self.handoff.global_step
        )
        return False
