"""The training-script side of elasticity: stop at a step boundary, hand state over, resume.

Usage (the whole contract; see docs/elastic.md)::

    with ElasticTrainer.start() as et:            # joins the collective of this generation
        model, opt = build()                      # build the same way in every incarnation
        sampler = ElasticSampler(len(data), global_batch=64, epochs=3, seed=0)
        et.register(model, opt, sampler)          # then restores: the most advanced survivor
        for plan in et.steps():                   #   broadcasts its state to everyone
            loss = loss_fn(model, data[plan.indices]) * et.loss_scale(plan)
            loss.backward()
            et.all_reduce_gradients()             # before optimizer.step(), always
            opt.step(); opt.zero_grad()
    # a rescale request (or SIGTERM) ends `steps()` at a boundary agreed by all ranks, saves
    # the state and exits with RESCALE_EXIT; a peer lost mid-step exits with PEER_LOST_EXIT.

Framework-neutral: every collective goes through the `Collective` of the framework the script
trains with (`agent.trainer.frameworks`: ``EDL_FRAMEWORK``, ``start(framework=...)``, or the
one framework the script has imported). Importing this module imports no framework.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, NoReturn

from agent.checkpoints.errors import CheckpointError, CheckpointStoreError
from agent.errors import ConfigError
from agent.protocol import env as names
from agent.protocol.control import (
    PEER_LOST_EXIT,
    RESCALE_EXIT,
    STANDBY_GENERATION,
    ControlChannel,
    NextWorld,
    Timings,
)
from agent.protocol.errors import ElasticError, RendezvousTimeout, StateTransferError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.checkpointer import Checkpointer
from agent.trainer.frameworks.base import Collective, Framework, ReduceOp, Reducer
from agent.trainer.ledger import SampleLedger
from agent.trainer.rendezvous import RendezvousHost, Superseded, meet
from agent.trainer.sampler import ElasticSampler, StepPlan
from agent.trainer.session import TrainingSession, start_session
from agent.trainer.state import TrainingState, load_local, save_local, write_local
from agent.trainer.step_gate import StepGate
from edl_common.ports import parse_port_range

log = logging.getLogger(__name__)


class PeerLost(ElasticError):
    """A collective failed: a peer died or left mid-step."""


@dataclass(frozen=True)
class ElasticTrainerSettings:
    """Set by the elastic agent in the trainer's environment; all optional when run bare."""

    control_dir: Path | None = None
    """EDL_CONTROL_DIR: the agent asks for a drain here and reads timings back."""
    state_dir: Path | None = None
    """EDL_STATE_DIR: this member's local copy of the training state."""
    ledger_dir: Path | None = None
    """EDL_SAMPLE_LEDGER: test mode, record every sample id trained."""
    member: str = "local"
    """EDL_MEMBER: this agent's member id (names ledger files)."""
    checkpoint_seconds: float = 30.0
    """EDL_LOCAL_SAVE_SECONDS (formerly EDL_CHECKPOINT_SECONDS): also save the local copy
    this often (bounds loss on a hang; durable checkpoints are `agent.trainer.checkpointer`)."""
    master_wait_seconds: float = 120.0
    """EDL_MASTER_WAIT_SECONDS: how long the ranks of a generation wait for each other
    (`agent.trainer.rendezvous`) before giving up on it."""
    reinit: str = "auto"
    """EDL_REINIT: ``auto`` (in-process when the self-test passes) or ``process`` (always
    restart the trainer process on a rescale)."""
    reinit_wait_seconds: float = 60.0
    """EDL_REINIT_WAIT_SECONDS: how long a drained in-process trainer waits for its next world."""
    reinit_limit: int = 50
    """EDL_REINIT_LIMIT: in-process generations per trainer process; after that it takes the
    process path once (bounds what a framework keeps per group: Paddle's comm contexts)."""
    store_ports: range | None = None
    """EDL_STORE_PORTS (``LOW-HIGH``): the ports rank 0's store of a generation may take
    (a firewall's opening); unset: any port the kernel finds free on every address."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ElasticTrainerSettings:
        """Reads the ``EDL_*`` variables."""

        def path(name: str) -> Path | None:
            raw = env.get(name, "").strip()
            return Path(raw) if raw else None

        return cls(
            control_dir=path(names.CONTROL_DIR),
            state_dir=path(names.STATE_DIR),
            ledger_dir=path(names.SAMPLE_LEDGER),
            member=env.get(names.MEMBER, "local") or "local",
            checkpoint_seconds=float(
                env.get(names.LOCAL_SAVE_SECONDS)
                or env.get(names.LOCAL_SAVE_SECONDS_OLD)
                or cls.checkpoint_seconds
            ),
            master_wait_seconds=float(env.get(names.MASTER_WAIT) or cls.master_wait_seconds),
            reinit=(env.get(names.REINIT) or cls.reinit).strip().lower(),
            reinit_wait_seconds=float(env.get(names.REINIT_WAIT) or cls.reinit_wait_seconds),
            reinit_limit=int(env.get(names.REINIT_LIMIT) or cls.reinit_limit),
            store_ports=_store_ports(env.get(names.STORE_PORTS, "")),
        )


def _store_ports(raw: str) -> range | None:
    if not raw.strip():
        return None
    try:
        return parse_port_range(raw)
    except ValueError as e:
        raise ConfigError(f"{names.STORE_PORTS}={e}") from None


class ElasticTrainer:
    """One trainer incarnation in one generation: collective, state hand-off, agreed stops."""

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
        self.rank = session.rank
        self.world_size = session.world_size
        self.generation = session.generation
        self.global_step = 0
        self._collective_of = collective
        self._channel = ControlChannel(settings.control_dir) if settings.control_dir else None
        self._timings = Timings(started=started_at or time.time())
        self._model: Any = None
        self._optimizer: Any = None
        self._sampler: ElasticSampler | None = None
        self._extra: dict[str, Any] = {}
        self._reducer: Reducer | None = None
        self._stop_signal = False
        self._in_collective = False
        self._last_save = time.monotonic()
        self._writer: threading.Thread | None = None
        """The local copy being written behind the training (`_save_behind`)."""
        self._applied = 0
        """States applied to the model so far (`_apply`): with the step, which state it holds."""
        self._torn = False
        """A state was being applied when it failed: the model is neither that one nor the last."""
        self._saved: tuple[int, int] | None = None
        """(`_applied`, `global_step`) of the state the local copy holds, once written."""
        self._copy_after_step: tuple[tuple[int, int], bytes | None] | None = None
        """After an in-process re-init: the agreed state's bytes (None: pickle it then) and
        which state they are, written behind once the first step in the new world is done."""
        self._first_step_reported = False
        self._last_step_end: float | None = None
        """Wall time the last step in this world ended (None: none yet)."""
        self._restored = False
        self._ledger = self._open_ledger()
        self._inprocess = False
        self._hosts: dict[str, RendezvousHost] = {}  # master endpoint -> our rendezvous host
        self._parent = os.getppid()  # read now: once the agent is gone it is too late
        self._reinits = 0
        self._checkpointer = checkpointer
        """Durable checkpoints (rank 0 writes; None without ``EDL_CHECKPOINT_URL``)."""
        self._from_checkpoint: str | None = None  # the checkpoint the last restore used

    def _open_ledger(self) -> SampleLedger | None:
        directory = self.settings.ledger_dir
        if directory is None:
            return None
        return SampleLedger(directory, self.settings.member, self.generation, self.rank)

    @property
    def reinit_mode(self) -> str:
        """``in-process`` or ``process``: how this trainer lives through a rescale."""
        return "in-process" if self._inprocess else "process"

    @classmethod
    def start(
        cls, env: Mapping[str, str] | None = None, framework: str | None = None
    ) -> ElasticTrainer:
        """Reads the world the agent gave us and brings the collective up (world > 1).

        `framework` (a registry name) overrides ``EDL_FRAMEWORK``; without either, the one
        registered framework the script has imported is used.
        """
        env = os.environ if env is None else env
        chosen = frameworks.choose(env, framework)
        trainer = cls(
            start_session(env, framework=chosen),
            ElasticTrainerSettings.from_env(env),
            chosen,
            chosen.collective(),
            checkpointer=Checkpointer.from_env(env, chosen.name),
        )
        signal.signal(signal.SIGTERM, trainer._on_sigterm)
        if trainer.settings.reinit == "auto":
            why_not = trainer._collective_of.self_test(trainer.session.world.backend or "gloo")
            trainer._inprocess = why_not is None
            if why_not:
                log.info("in-process re-init off (%s): rescales restart the process", why_not)
        if trainer.generation == STANDBY_GENERATION and trainer._channel is not None:
            trainer._wait_as_standby()
        try:
            trainer._init_collective()
        except (RendezvousTimeout, PeerLost) as e:
            trainer._exit(PEER_LOST_EXIT, f"cannot join generation {trainer.generation}: {e}")
        return trainer

    # -- collective ---------------------------------------------------------------------------

    def _init_collective(self) -> None:
        """Joins the newest world handed to us: meets its ranks, then forms the group.

        A newer world (or a stop, or the agent's death) that comes while the ranks are still
        meeting is followed at once: the meeting is in Python and gives up, so a trainer
        still starting or re-initialising never has to be killed for a rescale.
        """
        while True:
            self._mark("imported")
            world = self.session.world
            try:
                store = self._meet(world)
                break
            except Superseded as e:
                log.info("%s", e)
                self._follow_newer_world()
        self._mark("master")
        formed = replace(world, master=store) if store else world
        self._collective(
            self._collective_of.init, formed, self._inprocess, self.settings.master_wait_seconds
        )
        if self.world_size > 1:
            # Guard against a mixed rendezvous (a stale trainer of another generation).
            gens = self._all_reduce([self.generation, -self.generation], ReduceOp.MAX)
            if gens != [self.generation, -self.generation]:
                raise PeerLost(f"ranks disagree on the generation: {gens}")
        self._mark("initialised")

    def _meet(self, world: TrainerWorld) -> str:
        """The fresh store endpoint of this generation's group ("" for a world of one)."""
        if self._superseded():  # a world of one meets nobody, but may be stale already
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
            self._superseded,
            host,
        )

    def _host(self, endpoint: str) -> RendezvousHost:
        """Listens on our master endpoint; the previous incarnation may still be releasing it."""
        deadline = time.monotonic() + self.settings.master_wait_seconds
        while True:
            try:
                return RendezvousHost(endpoint, store_ports=self.settings.store_ports)
            except OSError as e:
                if time.monotonic() >= deadline or self._superseded():
                    raise RendezvousTimeout(f"cannot listen on {endpoint}: {e}") from e
                time.sleep(0.1)

    def _superseded(self) -> bool:
        """A stop, a newer world handed over, or the agent gone: stop waiting for this one."""
        if self._stop_signal or not self._agent_alive():
            return True
        return self._newer_world() is not None

    def _agent_alive(self) -> bool:
        lease = self.session.lease
        if lease is not None:
            return lease.alive
        return self._channel is None or os.getppid() == self._parent

    def _newer_world(self) -> NextWorld | None:
        """The world handed over for a later generation than ours, if any."""
        handed = self._channel.next_world() if self._channel is not None else None
        return handed if handed is not None and handed.generation > self.generation else None

    def _follow_newer_world(self) -> None:
        """Adopts the newer world (waiting for it if need be), or leaves when told to."""
        if self._stop_signal:
            self._exit(RESCALE_EXIT, f"stopped before joining generation {self.generation}")
        world = self._await_world()
        if world is None:
            self._exit(RESCALE_EXIT, f"no world to join after generation {self.generation}")
        now = time.time()
        self._adopt(world)
        self._timings = Timings(started=now, imported=now)

    def _all_reduce(self, values: list[int], op: ReduceOp) -> list[int]:
        result: list[int] = self._collective(self._collective_of.all_reduce_ints, values, op)
        return result

    def _collective(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self._in_collective = True
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise PeerLost(f"collective failed in generation {self.generation}: {e}") from e
        finally:
            self._in_collective = False

    def all_reduce_gradients(self) -> None:
        """Sums-and-averages gradients across ranks (timed as communication)."""
        if self._reducer is None:
            if self._model is None:
                raise ElasticError("register(model, optimizer, sampler) first")
            self._reducer = self._collective_of.gradient_all_reduce(
                self._model, self.session.recorder, self.world_size
            )
        self._collective(self._reducer)

    def loss_scale(self, plan: StepPlan) -> float:
        """Factor for a *summed* per-sample loss: the averaged gradient becomes the global mean.

        However the global batch is split, the maths then matches one process.
        """
        return self.world_size / plan.global_count

    # -- state --------------------------------------------------------------------------------

    def register(self, model: Any, optimizer: Any, sampler: ElasticSampler, **extra: Any) -> None:
        """Hands over what the state is made of, then restores it from the best survivor."""
        self._model, self._optimizer, self._sampler = model, optimizer, sampler
        self._extra = extra
        self._restore()

    def _snapshot(self) -> TrainingState:
        assert self._sampler is not None
        model, optimizer = self._collective_of.save_state(self._model, self._optimizer)
        return TrainingState(
            step=self.global_step,
            generation=self.generation,
            model=model,
            optimizer=optimizer,
            sampler=self._sampler.state_dict(),
            extra=dict(self._extra),
        )

    def _apply(self, state: TrainingState) -> None:
        assert self._sampler is not None
        self._torn = True  # until it is whole: a half-applied model is never saved
        self._collective_of.load_state(self._model, self._optimizer, state.model, state.optimizer)
        self._sampler.set_state_dict(state.sampler)
        self._extra.update(state.extra)
        self.global_step = state.step
        self._applied += 1
        self._torn = False

    @property
    def extra(self) -> dict[str, Any]:
        """Small picklable values carried with the state (e.g. a learning-rate schedule)."""
        return self._extra

    def save(self) -> None:
        """Writes the committed state to this member's local copy (no-op without a state dir).

        Never before the restore finished: a freshly built model must not overwrite a
        survivor's copy when the hand-off itself fails; nor a model a state was being applied
        to when that failed (the copy keeps the last whole state). A copy still being written
        behind is finished first, and a state the copy already holds is not written again.
        """
        self._finish_writing()
        self._copy_after_step = None
        if self.settings.state_dir is None or not self._restored or self._saved == self._holds():
            return
        if self._torn:
            log.warning("the model was left half-loaded: the local copy keeps the last state")
            return
        save_local(self.settings.state_dir, self._snapshot())
        self._saved = self._holds()
        self._last_save = time.monotonic()

    def _holds(self) -> tuple[int, int]:
        """Which state the model holds: states applied, steps trained since."""
        return self._applied, self.global_step

    def _save_behind(self, holds: tuple[int, int], blob: bytes) -> None:
        """Writes `blob` (the state `holds` names, pickled) as the local copy on a thread.

        The copy of an in-process re-init: written once the new world trains, while it
        trains, instead of before it forms, where every rank waited for the disk (about a
        second for a state of a few hundred MB). Any later `save` waits for it first.
        """
        self._finish_writing()
        directory = self.settings.state_dir
        if directory is None:
            return

        def write() -> None:
            try:
                write_local(directory, blob)
            except StateTransferError as e:
                log.warning("%s", e)
                return
            self._saved = holds

        self._writer = threading.Thread(target=write, name="edl-state-copy", daemon=True)
        self._writer.start()
        self._last_save = time.monotonic()

    def _copy_behind(self) -> None:
        """After the first step of an in-process world: its agreed state, written behind."""
        due, self._copy_after_step = self._copy_after_step, None
        if due is None or self.settings.state_dir is None:
            return
        holds, blob = due
        if blob is None:  # nothing crossed the wire (a world of one): pickle the state now
            holds, blob = self._holds(), self._snapshot().to_bytes()
        self._save_behind(holds, blob)

    def _finish_writing(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.join()

    def _restore(
        self,
        state: TrainingState | None = None,
        how: str = "resumes",
        live: TrainingState | None = None,
    ) -> None:
        """Everyone continues from the most advanced state.

        That is `state`, our local copy, a peer's, or the newest durable checkpoint when it is
        newer than every member's. `live`: an in-process re-init's own state (a snapshot of
        the model in memory), never applied back to the model it was read from; the agreed
        state's bytes (sent or received) are then kept for the local copy (`_copy_behind`).
        """
        self._from_checkpoint = None
        if live is not None:
            state = live
        elif state is None and self.settings.state_dir is not None:
            state = load_local(self.settings.state_dir)
        agreed = None
        if self.world_size > 1:
            agreed = self._broadcast_state(state, live)
        else:
            mine = state.step if state is not None else -1
            state = self._or_checkpoint(state, mine, *self._checkpoint_hint())
            if state is not None and state is not live:
                self._apply(state)
        if live is not None:
            self._copy_after_step = (self._holds(), agreed)
        self._restored = True
        self._mark("restored")
        if self._ledger is not None and self.rank == 0:
            self._ledger.restored(self.global_step, checkpoint=self._from_checkpoint)
        log.info(
            "generation %d rank %d/%d %s at step %d",
            self.generation,
            self.rank,
            self.world_size,
            how,
            self.global_step,
        )

    def _broadcast_state(
        self, local: TrainingState | None, live: TrainingState | None = None
    ) -> bytes | None:
        """The most advanced state on every rank; its bytes (None when nobody had state)."""
        mine = local.step if local is not None else -1
        best, newest, unreadable = self._all_reduce([mine, *self._checkpoint_hint()], ReduceOp.MAX)
        local = self._or_checkpoint(local, best, newest, unreadable)
        if newest > best:  # every rank knows: rank 0 may now hold the checkpoint's state
            mine = local.step if local is not None else -1
            (best,) = self._all_reduce([mine], ReduceOp.MAX)
        if best < 0:
            return None  # nobody has state: a fresh start, every rank built the same model
        (src,) = self._all_reduce([self.rank if mine == best else self.world_size], ReduceOp.MIN)
        sender = src == self.rank and local is not None
        blob = local.to_bytes() if sender and local is not None else b""
        received: bytes = self._collective(self._collective_of.broadcast_bytes, blob, src)
        if sender and local is not None:
            if local is not live:  # what it sent is `local`: no need to read it back
                self._apply(local)
            return received
        try:
            self._apply(TrainingState.from_bytes(received))
        except StateTransferError:
            raise
        except Exception as e:
            raise StateTransferError(f"cannot apply the state from rank {src}: {e}") from e
        return received

    def _checkpoint_hint(self) -> tuple[int, int]:
        """Rank 0: (the newest checkpoint's step or -1, 1 when the store cannot be read)."""
        if self._checkpointer is None or self.rank != 0:
            return -1, 0
        try:
            return self._checkpointer.newest_step(), 0
        except CheckpointStoreError as e:
            log.warning("cannot read the checkpoints: %s", e)
            return -1, 1

    def _or_checkpoint(
        self, local: TrainingState | None, best: int, newest: int, unreadable: int
    ) -> TrainingState | None:
        """`local`, or (rank 0) the newest usable checkpoint if past every member's `best` step.

        A job nobody has state for never starts afresh past checkpoints it cannot read: the
        trainer exits instead (its agent leaves; the pod restarts and tries again).
        """
        if unreadable and best < 0:
            self._exit(1, "no member has training state and the checkpoints cannot be read")
        if newest <= best or self.rank != 0 or self._checkpointer is None:
            return local
        try:
            found = self._checkpointer.newest_after(best)
        except CheckpointError as e:
            self._exit(1, f"cannot restore from the checkpoints: {e}")
        if found is None:
            log.warning("no usable checkpoint past step %d: continuing without one", best)
            return local
        m = found.manifest
        self._from_checkpoint = m.name
        log.info(
            "restoring from checkpoint %s (step %d, epoch %d, written %.0f s ago in generation "
            "%d): no member has newer state; what the previous world trained after step %d is "
            "redone%s",
            m.name,
            m.step,
            m.epoch,
            max(0.0, time.time() - m.written_at),
            m.generation,
            m.step,
            "; the job finished there, nothing is left to train" if m.finished else "",
        )
        return found.state

    # -- the loop -----------------------------------------------------------------------------

    def steps(self, gate: StepGate | None = None) -> Iterator[StepPlan]:
        """Yields this rank's part of each step; stops at an agreed boundary on a rescale.

        With a `gate` (tests), no step starts past what it allows: every rank waits at the
        boundary, still answering rescales, until it allows more (`agent.trainer.step_gate`).
        """
        sampler = self._sampler
        if sampler is None:
            raise ElasticError("register(model, optimizer, sampler) first")
        recorder = self.session.recorder
        while (plan := sampler.plan(self.rank, self.world_size)) is not None:
            if gate is not None and self._held_at(gate):
                self._rescale()
                continue  # the plan again, in the new world
            if self._ledger is not None:
                self._ledger.intent(self.global_step, plan.epoch, plan.indices.tolist())
            recorder.begin_step()
            yield plan
            recorder.end_step(samples=len(plan.indices))
            sampler.advance(plan)
            self.global_step += 1
            self._last_step_end = time.time()
            if not self._first_step_reported:
                self._mark("first_step")
                self._first_step_reported = True
                self._copy_behind()
            checkpointer = self._checkpointer
            if (
                checkpointer is not None
                and self.rank == 0
                and not sampler.done  # the last step: the finish writes one
                and checkpointer.due(self.global_step)
            ):
                checkpointer.submit(self._snapshot)
            if self._stop_agreed():
                self._rescale()
            if time.monotonic() - self._last_save >= self.settings.checkpoint_seconds:
                self.save()

    def _rescale(self) -> None:
        """An agreed stop at this boundary: exit for the agent, or move in-process."""
        self._mark_stopped()
        if not self._inprocess:
            self._exit(RESCALE_EXIT, f"stopping at step {self.global_step} for a rescale")
        self._reinit()

    def _held_at(self, gate: StepGate) -> bool:
        """Waits while `gate` allows no more steps; True when a rescale was agreed meanwhile.

        The ranks agree on each round (the highest drain flag, the lowest allowance), so they
        all leave the wait at the same boundary, as `_stop_agreed` does.
        """
        deadline = time.monotonic() + gate.max_wait_seconds
        rounds = int(gate.max_wait_seconds / gate.poll_seconds) + 1
        for _ in range(rounds):
            drain = 1 if self.drain_requested() else 0
            allowed, expired = gate.allowed(), 1 if time.monotonic() >= deadline else 0
            if self.world_size > 1:
                drain, negated, expired = self._all_reduce([drain, -allowed, expired], ReduceOp.MAX)
                allowed = -negated
            if drain:
                return True
            if self.global_step < allowed:
                return False
            if expired:
                break
            time.sleep(gate.poll_seconds)
        log.warning("step gate %s held step %d too long; opening it", gate.path, self.global_step)
        return False

    def _reinit(self) -> None:
        """Moves this live process into the next world (or exits when it is not in it)."""
        # The local copy is written after the new world's first step, from the agreed state's
        # bytes (`_copy_behind`), not here where every rank would wait for the disk: should
        # anything below fail, `_exit` saves this boundary's state first (the model is still
        # it, unless a state was half applied: then the copy keeps the one before).
        world = self._await_world()
        if world is None:
            self._exit(RESCALE_EXIT, f"leaving at step {self.global_step}")
        now = time.time()
        self._adopt(world)
        self._timings = Timings(started=now, imported=now)
        self._stop_signal = False
        try:
            self._init_collective()
            self._restore(how="continues in-process", live=self._snapshot())
        except (PeerLost, RendezvousTimeout, StateTransferError) as e:
            self._exit(PEER_LOST_EXIT, f"in-process re-init to generation {world.generation}: {e}")
        self._reinits += 1
        if self._reinits >= self.settings.reinit_limit:
            log.info(
                "%d in-process generations in this process: the next rescale restarts it "
                "(releasing what the framework keeps per group)",
                self._reinits,
            )
            self._inprocess = False

    def _wait_as_standby(self) -> None:
        """Started warm before our agent joined: wait (as long as the agent lives) for a world.

        The framework is already imported by now, so the survivors never wait for our import.
        """
        self._mark("imported")
        world = self._await_world(wait=float("inf"))
        if world is None:
            self._exit(RESCALE_EXIT, "told to leave before joining a world")
        self._adopt(world)

    def _adopt(self, world: TrainerWorld) -> None:
        os.environ.update(self.framework.launch_env(world))  # for code that reads the env
        self.session.world = world
        self.rank, self.world_size, self.generation = world.rank, world.world_size, world.generation
        self._first_step_reported = False
        self._last_step_end = None
        self._reducer = None
        if self._ledger is not None:
            self._ledger.close()
        self._ledger = self._open_ledger()

    def _await_world(self, wait: float | None = None) -> TrainerWorld | None:
        if self._channel is None:
            return None
        wait = self.settings.reinit_wait_seconds if wait is None else wait
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self._agent_alive():
            handed = self._newer_world()
            if handed is not None:
                return handed.world  # None: leave
            time.sleep(0.02)
        log.error("no next world within %.0f s (or the agent is gone)", wait)
        return None

    def _leaving(self) -> bool:
        """This trainer stops for good: SIGTERM, or the next world handed over is "leave"."""
        handed = self._newer_world()
        return self._stop_signal or (handed is not None and handed.world is None)

    def _last_checkpoint(self, finished: bool = False) -> None:
        """Rank 0 writes the committed state before leaving (or marks the job finished)."""
        if self._checkpointer is not None and self.rank == 0 and self._restored:
            self._checkpointer.write_now(self._snapshot, finished=finished)

    def drain_requested(self) -> bool:
        """True once the agent asked this trainer to stop (or it got SIGTERM)."""
        if self._stop_signal:
            return True
        return self._channel is not None and self._channel.drain_requested(self.generation)

    def _stop_agreed(self) -> bool:
        local = self.drain_requested()
        if self.world_size == 1:
            return local
        (flag,) = self._all_reduce([1 if local else 0], ReduceOp.MAX)
        return flag > 0

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = True

    # -- reporting and exit -------------------------------------------------------------------

    def _mark(self, milestone: str, **values: float | int) -> None:
        reached: dict[str, Any] = {milestone: time.time(), **values}
        self._timings = replace(
            self._timings,
            rank=self.rank,
            reinit=self.reinit_mode,
            framework=self.framework.name,
            **reached,
        )
        if self._channel is None:
            return
        try:
            self._channel.report(self.generation, self._timings)
        except OSError as e:
            log.warning("cannot report timings to %s: %s", self._channel.directory, e)

    def _mark_stopped(self) -> None:
        """Reports when training stood still in this world: the end of its last step.

        Reported only once a step was trained here (a world left before its first step
        has no pause of its own: the rescale record runs through it).
        """
        if self._last_step_end is not None and self._timings.stopped is None:
            self._mark("stopped", stopped=self._last_step_end)

    def _exit(self, status: int, why: str) -> NoReturn:
        if status == PEER_LOST_EXIT:
            self._mark_stopped()  # the step that broke is redone: training stood still before
        try:
            self.save()
        except StateTransferError as e:
            log.error("%s", e)
        if status == RESCALE_EXIT and self._leaving():
            self._last_checkpoint()  # if every member is leaving, the job resumes from here
        log.info("%s (exit %d)", why, status)
        self.close()
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: a framework's collective destructors can block on dead peers.
        os._exit(status)

    def close(self) -> None:
        """Flushes the final metrics report and the ledger (and a local copy being written)."""
        self._finish_writing()
        self.session.close()
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    def __enter__(self) -> ElasticTrainer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, PeerLost):
            # The failed collective came before optimizer.step(): the model is still the
            # committed one, so saving it loses nothing but the unfinished step.
            self._exit(PEER_LOST_EXIT, f"{exc}; saved step {self.global_step}")
        if exc is None:  # the script is done: tell the agent at which step the job finished
            self._last_checkpoint(finished=True)
            self._mark("finished", finished_step=self.global_step)
        self.close()
