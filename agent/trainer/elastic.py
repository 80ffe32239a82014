"""The training-script side of elasticity: stop at a step boundary, hand state over, resume.

`ElasticTrainer` composes its three jobs, each a class of its own: joining worlds
(`agent.trainer.joining.WorldJoiner`), the step loop (`agent.trainer.step_loop.StepLoop`) and
the state hand-off with its checkpoints (`agent.trainer.handoff.StateHandoff`). It decides
what a rescale does (move in-process, or exit for the agent to restart it) and is the one
place the trainer process exits from. The whole contract, with a framework's own DataLoader
and data-parallel model (`agent.trainer.data`, `agent.trainer.data_parallel`)::

    et = ElasticTrainer.start()                      # joins the collective of this generation
    model = ElasticDataParallel(model, optimizer, et)          # DDP / paddle.DataParallel
    loader = ElasticDataLoader(dataset, global_batch, et, num_workers=2)
    for epoch in et.epochs(10):                      # restores: the most advanced survivor
        for x, y in loader:                          #   broadcasts its state to everyone
            loss_fn(model(x), y).backward()
            optimizer.step(); optimizer.zero_grad()

or with sample ids instead of a loader (the first API, docs/elastic.md)::

    with ElasticTrainer.start() as et:
        et.register(model, optimizer, ElasticSampler(len(data), 64, epochs=3))
        for plan in et.steps():
            loss = loss_fn(model, data[plan.indices]) * et.loss_scale(plan)  # summed loss
            loss.backward(); et.all_reduce_gradients(); opt.step(); opt.zero_grad()

A rescale request (or SIGTERM) ends a world at a step boundary agreed by all ranks; a peer
lost mid-step makes the trainer exit with PEER_LOST_EXIT after saving the last committed state.

Framework-neutral: every collective goes through the `Collective` of the framework the script
trains with (`agent.trainer.frameworks`: ``EDL_FRAMEWORK``, ``start(framework=...)``, or the
one framework the script has imported). Importing this module imports no framework.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, NoReturn

from agent.protocol.control import PEER_LOST_EXIT, RESCALE_EXIT, ControlChannel
from agent.protocol.errors import ElasticError, RendezvousTimeout, StateTransferError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.checkpointer import Checkpointer
from agent.trainer.errors import LeaveTraining, PeerLost
from agent.trainer.frameworks.base import Collective, Framework, Reducer, WorldListener
from agent.trainer.handoff import StateHandoff
from agent.trainer.joining import WorldJoiner
from agent.trainer.ledger import SampleLedger
from agent.trainer.recording import StepRecorder
from agent.trainer.sampler import ElasticSampler, StepPlan
from agent.trainer.session import TrainingSession, start_session
from agent.trainer.settings import ElasticTrainerSettings
from agent.trainer.state import TrainingState
from agent.trainer.step_gate import StepGate
from agent.trainer.step_loop import StepLoop

log = logging.getLogger(__name__)

__all__ = ["ElasticTrainer", "ElasticTrainerSettings", "PeerLost"]


class UntilConfigured(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes the trainer library's lines to stderr while the script has no logging set up.

    A pod's log then says why a trainer restored, rescaled or left; once the script configures
    logging (a root handler), its configuration alone decides, and nothing is written twice.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


def log_until_configured(logger: logging.Logger) -> None:
    """Gives `logger` (once) an `UntilConfigured` handler at INFO."""
    if any(isinstance(h, UntilConfigured) for h in logger.handlers):
        return
    handler = UntilConfigured()
    handler.setFormatter(logging.Formatter("edl-trainer: %(message)s"))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


class ElasticTrainer:
    """One trainer process through the generations it lives in: joins, steps, hands over."""

    def __init__(
        self,
        session: TrainingSession,
        settings: ElasticTrainerSettings,
        framework: Framework,
        collective: Collective,
        started_at: float | None = None,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self.session = session
        self.settings = settings
        self.framework = framework
        """The framework the script trains with (its name is reported to the agent)."""
        self.collective = collective
        """The framework's collective of this process (forms every world's group)."""
        channel = ControlChannel(settings.control_dir) if settings.control_dir else None
        self.joiner = WorldJoiner(
            session, settings, framework, collective, channel, self._entered, started_at
        )
        self.handoff = StateHandoff(self.joiner, collective, settings, checkpointer)
        gate = StepGate(settings.step_gate) if settings.step_gate is not None else None
        self.loop = StepLoop(self.joiner, self.handoff, session.recorder, self._rescale, gate)
        self._listeners: list[WorldListener] = []
        self._reducer: Reducer | None = None
        self._reinits = 0
        self._finished = False
        self._entered(session.world)

    # -- the world ------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This trainer's rank in its current world."""
        return self.joiner.rank

    @property
    def world_size(self) -> int:
        """Ranks in the current world."""
        return self.joiner.world_size

    @property
    def generation(self) -> int:
        """Generation of the current world (grows at every world change)."""
        return self.joiner.generation

    @property
    def global_step(self) -> int:
        """Steps trained in the lineage of the model (restored ones included)."""
        return self.handoff.global_step

    @property
    def reinit_mode(self) -> str:
        """``in-process`` or ``process``: how this trainer lives through a rescale."""
        return self.joiner.reinit_mode

    @property
    def recorder(self) -> StepRecorder:
        """The step recorder (steps and communication reach the agent's metrics through it)."""
        return self.session.recorder

    @property
    def share(self) -> float:
        """This rank's part of the current step's global batch (its gradient weight)."""
        return self.loop.share

    @classmethod
    def start(
        cls, env: Mapping[str, str] | None = None, framework: str | None = None
    ) -> ElasticTrainer:
        """Reads the world the agent gave us and brings the collective up.

        `framework` (a registry name) overrides ``EDL_FRAMEWORK``; without either, the one
        registered framework the script has imported is used. Installs a SIGTERM handler (a
        stop at the next agreed boundary) and an exception hook: a lost peer that ends the
        script (its collective failed) exits with PEER_LOST_EXIT, the last state saved.
        """
        env = os.environ if env is None else env
        log_until_configured(logging.getLogger("agent.trainer"))
        chosen = frameworks.choose(env, framework)
        trainer = cls(
            start_session(env, framework=chosen),
            ElasticTrainerSettings.from_env(env),
            chosen,
            chosen.collective(),
            checkpointer=Checkpointer.from_env(env, chosen.name),
        )
        signal.signal(signal.SIGTERM, trainer.joiner.on_sigterm)
        sys.excepthook = trainer._excepthook(sys.excepthook)
        trainer.joiner.test_in_process()
        trainer.join_first_world()
        return trainer

    def join_first_world(self) -> None:
        """Waits for a world if started warm, then joins it (or exits: see `start`)."""
        try:
            self.joiner.wait_as_standby()
            self.joiner.join()
        except LeaveTraining as e:
            self._exit(e.status, e.why)
        except (RendezvousTimeout, PeerLost) as e:
            self._exit(PEER_LOST_EXIT, f"cannot join generation {self.generation}: {e}")

    def _entered(self, world: TrainerWorld) -> None:
        """A new world begins (the first, or one adopted): nothing of the last one carries."""
        self._reducer = None
        ledger = None
        if self.settings.ledger_dir is not None:
            ledger = SampleLedger(
                self.settings.ledger_dir, self.settings.member, world.generation, world.rank
            )
        self.loop.enter_world(ledger)

    def add_listener(self, listener: WorldListener) -> None:
        """`listener` hears of every world change (a data-parallel model rebuilt on its group)."""
        self._listeners.append(listener)

    def on_step_end(self, hook: Callable[[], None]) -> None:
        """Calls `hook` at the end of every step (training thread)."""
        self.loop.on_step_end(hook)

    # -- what the state is made of --------------------------------------------------------------

    def register(self, model: Any, optimizer: Any, sampler: ElasticSampler, **extra: Any) -> None:
        """Hands over what the state is made of, then restores it from the best survivor."""
        self.attach_model(model, optimizer)
        self.attach_sampler(sampler)
        self.handoff.extra.update(extra)
        self._restore()

    def attach_model(self, model: Any, optimizer: Any) -> None:
        """The model (unwrapped) and optimizer whose state every world agrees on."""
        self.handoff.attach(model, optimizer)

    def attach_sampler(self, sampler: ElasticSampler) -> None:
        """The sampler whose position every world agrees on (one per trainer)."""
        self.handoff.attach_sampler(sampler)

    @property
    def extra(self) -> dict[str, Any]:
        """Small picklable values carried with the state (e.g. a learning-rate schedule)."""
        return self.handoff.extra

    def ensure_restored(self) -> None:
        """Restores the state of this world unless that is done (the first loader pass)."""
        if not self.handoff.restored:
            self._restore()

    def save(self) -> None:
        """Writes the committed state to this member's local copy (see `StateHandoff.save`)."""
        self.handoff.save()

    def _restore(
        self,
        state: TrainingState | None = None,
        how: str = "resumes",
        live: TrainingState | None = None,
    ) -> None:
        """Everyone continues from the most advanced state (`StateHandoff.restore`)."""
        try:
            self.handoff.restore(state, live)
        except LeaveTraining as e:
            self._exit(e.status, e.why)
        self.joiner.mark("restored")
        ledger = self.loop.ledger
        if ledger is not None and self.rank == 0:
            ledger.restored(self.global_step, checkpoint=self.handoff.from_checkpoint)
        log.info(
            "generation %d rank %d/%d %s at step %d",
            self.generation,
            self.rank,
            self.world_size,
            how,
            self.global_step,
        )

    # -- the loop -------------------------------------------------------------------------------

    def steps(self, gate: StepGate | None = None) -> Iterator[StepPlan]:
        """Yields this rank's part of each step; stops at an agreed boundary on a rescale.

        With a `gate` (tests; else ``EDL_STEP_GATE``'s), no step starts past what it allows:
        every rank waits at the boundary, still answering rescales (`agent.trainer.step_gate`).
        """
        return self.loop.steps(gate)

    def epochs(self, count: int) -> Iterator[int]:
        """The epochs left to train of `count`, restored first; the job is finished after them.

        Iterate the `ElasticDataLoader` once per epoch (it ends with the epoch). An epoch the
        job already trained before a restart is not yielded again.
        """
        sampler = self.handoff.sampler
        sampler.epochs = count
        self.ensure_restored()
        while not sampler.done:
            epoch = sampler.epoch
            yield epoch
            if sampler.epoch == epoch:
                raise ElasticError(
                    f"epoch {epoch} ended at step {self.global_step} before its last step: "
                    "iterate the ElasticDataLoader to its end once per epoch"
                )
        self.finish()

    def all_reduce_gradients(self) -> None:
        """Sums-and-averages gradients across ranks (timed as communication)."""
        if self._reducer is None:
            if self.handoff.model is None:
                raise ElasticError("register(model, optimizer, sampler) first")
            self._reducer = self.collective.gradient_all_reduce(
                self.handoff.model, self.session.recorder, self.world_size
            )
        self.joiner.guarded(self._reducer)

    def loss_scale(self, plan: StepPlan) -> float:
        """Factor for a *summed* per-sample loss: the averaged gradient becomes the global mean.

        However the global batch is split, the maths then matches one process.
        """
        return self.world_size / plan.global_count

    def drain_requested(self) -> bool:
        """True once the agent asked this trainer to stop (or it got SIGTERM)."""
        return self.joiner.drain_requested()

    # -- world changes --------------------------------------------------------------------------

    def _rescale(self) -> None:
        """An agreed stop at this boundary: exit for the agent, or move in-process."""
        self.joiner.mark_stopped(self.loop.last_step_end)
        if not self.joiner.in_process:
            self._exit(RESCALE_EXIT, f"stopping at step {self.global_step} for a rescale")
        self._reinit()

    def _reinit(self) -> None:
        """Moves this live process into the next world (or exits when it is not in it)."""
        # The local copy is written after the new world's first step, from the agreed state's
        # bytes (`StateHandoff.copy_behind`), not here where every rank would wait for the
        # disk: should anything below fail, `_exit` saves this boundary's state first (the
        # model is still it, unless a state was half applied: then the copy keeps the one
        # before).
        joiner = self.joiner
        world = joiner.await_world()
        if world is None:
            self._exit(RESCALE_EXIT, f"leaving at step {self.global_step}")
        for listener in self._listeners:
            listener.world_ending()
        joiner.adopt(world)
        joiner.stop_signal = False
        try:
            joiner.join()
            self._restore(how="continues in-process", live=self.handoff.snapshot())
        except LeaveTraining as e:
            self._exit(e.status, e.why)
        except (PeerLost, RendezvousTimeout, StateTransferError) as e:
            self._exit(PEER_LOST_EXIT, f"in-process re-init to generation {world.generation}: {e}")
        try:
            for listener in self._listeners:
                listener.world_ready()
        except Exception as e:  # the process path builds it afresh
            self._exit(PEER_LOST_EXIT, f"rebuilding on generation {world.generation}: {e}")
        self._reinits += 1
        if self._reinits >= self.settings.reinit_limit:
            log.info(
                "%d in-process generations in this process: the next rescale restarts it "
                "(releasing what the framework keeps per group)",
                self._reinits,
            )
            joiner.in_process = False

    # -- the end --------------------------------------------------------------------------------

    def finish(self) -> None:
        """The job is done: rank 0's last checkpoint says so, and the agent is told the step."""
        if self._finished:
            return
        self._finished = True
        self.handoff.last_checkpoint(finished=True)
        self.joiner.mark("finished", finished_step=self.global_step)

    def peer_lost(self, why: str) -> NoReturn:
        """A collective of this step failed (before the optimizer stepped): save and exit."""
        self._exit(PEER_LOST_EXIT, f"{why}; saved step {self.global_step}")

    def _is_peer_loss(self, exc: BaseException) -> bool:
        """`exc` ended the script because a collective failed (a peer died or left)."""
        return isinstance(exc, PeerLost) or any(
            listener.communication_failed() for listener in self._listeners
        )

    def _excepthook(
        self, previous: Callable[[type[BaseException], BaseException, TracebackType | None], Any]
    ) -> Callable[[type[BaseException], BaseException, TracebackType | None], Any]:
        def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> Any:
            if self._is_peer_loss(exc):
                # The failed collective came before optimizer.step(): the model is still the
                # committed one, so saving it loses nothing but the unfinished step.
                self.peer_lost(str(exc).splitlines()[0] if str(exc) else kind.__name__)
            return previous(kind, exc, tb)

        return hook

    def _exit(self, status: int, why: str) -> NoReturn:
        if status == PEER_LOST_EXIT:
            # the step that broke is redone: training stood still before it
            self.joiner.mark_stopped(self.loop.last_step_end)
        try:
            self.handoff.save()
        except StateTransferError as e:
            log.error("%s", e)
        if status == RESCALE_EXIT and self.joiner.leaving():
            self.handoff.last_checkpoint()  # if every member is leaving, the job resumes here
        # A planned stop is routine; anything else is what a pod's log must say.
        log.log(
            logging.INFO if status == RESCALE_EXIT else logging.WARNING, "%s (exit %d)", why, status
        )
        self.close()
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: a framework's collective destructors can block on dead peers.
        os._exit(status)

    def close(self) -> None:
        """Flushes the final metrics report and the ledger (and a local copy being written)."""
        self.handoff.finish_writing()
        self.session.close()
        self.loop.close()

    def __enter__(self) -> ElasticTrainer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self._is_peer_loss(exc):
            self.peer_lost(str(exc))
        if exc is None:  # the script is done: tell the agent at which step the job finished
            self.finish()
        self.close()
