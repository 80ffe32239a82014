"""State hand-off and checkpoints: the third of `ElasticTrainer`'s jobs (`agent.trainer.elastic`).

The training state is the model, the optimizer, the sampler's position, the global step and
a few small picklable values. On every world a trainer joins, the most advanced state among
its ranks (or the newest durable checkpoint, when it is newer than every member's) is
broadcast to every rank; an in-process trainer keeps its own state in memory and never
applies it back to its model. The local copy (`agent.trainer.state`) is written at every
agreed stop, after a lost peer and every `checkpoint_seconds`; the copy of an in-process world
is written behind, once the new world trains. Rank 0 writes durable checkpoints
(`agent.trainer.checkpointer`) at due step boundaries.

Importing this module imports no framework.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from agent.checkpoints.errors import CheckpointError, CheckpointStoreError
from agent.protocol.errors import ElasticError, StateTransferError
from agent.trainer.checkpointer import Checkpointer
from agent.trainer.errors import LeaveTraining
from agent.trainer.frameworks.base import Collective, ReduceOp
from agent.trainer.sampler import ElasticSampler
from agent.trainer.settings import ElasticTrainerSettings
from agent.trainer.state import TrainingState, load_local, save_local, write_local

log = logging.getLogger(__name__)


class WorldLink(Protocol):
    """What the hand-off needs of the world it restores in (`WorldJoiner` is one)."""

    @property
    def rank(self) -> int:
        """This trainer's rank."""
        ...

    @property
    def world_size(self) -> int:
        """Ranks in the world."""
        ...

    @property
    def generation(self) -> int:
        """The world's generation."""
        ...

    def all_reduce(self, values: list[int], op: ReduceOp) -> list[int]:
        """Element-wise `op` over every rank; raises `PeerLost`."""
        ...

    def broadcast_bytes(self, blob: bytes, src: int) -> bytes:
        """Rank `src`'s bytes on every rank; raises `PeerLost`."""
        ...


class StateHandoff:
    """What the training state is made of, where it is kept, and how a world agrees on it."""

    def __init__(
        self,
        link: WorldLink,
        collective: Collective,
        settings: ElasticTrainerSettings,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self.link = link
        self.settings = settings
        self._collective = collective
        self.model: Any = None
        self.optimizer: Any = None
        self._sampler: ElasticSampler | None = None
        self.extra: dict[str, Any] = {}
        """Small picklable values carried with the state (e.g. a learning-rate schedule)."""
        self.global_step = 0
        """Steps trained in the lineage of the model (the state's step)."""
        self.restored = False
        """The state of this world was agreed on (nothing is saved before)."""
        self.from_checkpoint: str | None = None
        """The durable checkpoint the last restore read (None: a member's state, or none)."""
        self.checkpointer = checkpointer
        """Durable checkpoints (rank 0 writes; None without ``EDL_CHECKPOINT_URL``)."""
        self._last_save = time.monotonic()
        self._writer: threading.Thread | None = None
        """The local copy being written behind the training (`_save_behind`)."""
        self._applied = 0
        """States applied to the model so far (`apply`): with the step, which state it holds."""
        self._torn = False
        """A state was being applied when it failed: the model is neither that one nor the last."""
        self._saved: tuple[int, int] | None = None
        """(`_applied`, `global_step`) of the state the local copy holds, once written."""
        self._copy_after_step: tuple[tuple[int, int], bytes | None] | None = None
        """After an in-process re-init: the agreed state's bytes (None: pickle it then) and
        which state they are, written behind once the first step in the new world is done."""

    # -- what the state is made of ----------------------------------------------------------------

    def attach(self, model: Any, optimizer: Any) -> None:
        """The model and optimizer whose state is handed over (before the first restore)."""
        if self.restored:
            raise ElasticError("attach the model before the training state is restored")
        self.model, self.optimizer = model, optimizer

    def attach_sampler(self, sampler: ElasticSampler) -> None:
        """The sampler whose position is handed over (before the first restore)."""
        if self.restored:
            raise ElasticError("attach the sampler before the training state is restored")
        self._sampler = sampler

    @property
    def sampler(self) -> ElasticSampler:
        """The attached sampler (raises `ElasticError` before one is)."""
        if self._sampler is None:
            raise ElasticError(
                "no data to train: give the trainer an ElasticDataLoader (or register a sampler)"
            )
        return self._sampler

    def snapshot(self) -> TrainingState:
        """The committed state, as the framework's numpy values (views of the live tensors)."""
        model, optimizer = self._collective.save_state(self.model, self.optimizer)
        return TrainingState(
            step=self.global_step,
            generation=self.link.generation,
            model=model,
            optimizer=optimizer,
            sampler=self.sampler.state_dict(),
            extra=dict(self.extra),
        )

    def apply(self, state: TrainingState) -> None:
        """Loads `state` into the model, optimizer and sampler (a failure leaves it torn)."""
        self._torn = True  # until it is whole: a half-applied model is never saved
        self._collective.load_state(self.model, self.optimizer, state.model, state.optimizer)
        self.sampler.set_state_dict(state.sampler)
        self.extra.update(state.extra)
        self.global_step = state.step
        self._applied += 1
        self._torn = False

    def holds(self) -> tuple[int, int]:
        """Which state the model holds: states applied, steps trained since."""
        return self._applied, self.global_step

    # -- the local copy ---------------------------------------------------------------------------

    def save(self) -> None:
        """Writes the committed state to this member's local copy (no-op without a state dir).

        Never before the restore finished: a freshly built model must not overwrite a
        survivor's copy when the hand-off itself fails; nor a model a state was being applied
        to when that failed (the copy keeps the last whole state). A copy still being written
        behind is finished first, and a state the copy already holds is not written again.
        """
        self.finish_writing()
        self._copy_after_step = None
        if self.settings.state_dir is None or not self.restored or self._saved == self.holds():
            return
        if self._torn:
            log.warning("the model was left half-loaded: the local copy keeps the last state")
            return
        save_local(self.settings.state_dir, self.snapshot())
        self._saved = self.holds()
        self._last_save = time.monotonic()

    def save_if_due(self) -> None:
        """`save` when `checkpoint_seconds` have passed since the last one (a bound on a hang)."""
        if time.monotonic() - self._last_save >= self.settings.checkpoint_seconds:
            self.save()

    def _save_behind(self, holds: tuple[int, int], blob: bytes) -> None:
        """Writes `blob` (the state `holds` names, pickled) as the local copy on a thread.

        The copy of an in-process re-init: written once the new world trains, while it
        trains, instead of before it forms, where every rank waited for the disk (about a
        second for a state of a few hundred MB). Any later `save` waits for it first.
        """
        self.finish_writing()
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

    def copy_behind(self) -> None:
        """After the first step of an in-process world: its agreed state, written behind."""
        due, self._copy_after_step = self._copy_after_step, None
        if due is None or self.settings.state_dir is None:
            return
        holds, blob = due
        if blob is None:  # nothing crossed the wire (a world of one): pickle the state now
            holds, blob = self.holds(), self.snapshot().to_bytes()
        self._save_behind(holds, blob)

    def finish_writing(self) -> None:
        """Waits for the local copy being written behind (if any)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.join()

    # -- agreeing on the state of a world ---------------------------------------------------------

    def restore(
        self, state: TrainingState | None = None, live: TrainingState | None = None
    ) -> None:
        """Everyone continues from the most advanced state.

        That is `state`, our local copy, a peer's, or the newest durable checkpoint when it is
        newer than every member's. `live`: an in-process re-init's own state (a snapshot of
        the model in memory), never applied back to the model it was read from; the agreed
        state's bytes (sent or received) are then kept for the local copy (`copy_behind`).

        Raises:
            PeerLost: a collective of the hand-off failed.
            StateTransferError: the state received cannot be applied.
            LeaveTraining: nobody has state and the checkpoints cannot be read.
        """
        self.from_checkpoint = None
        if live is not None:
            state = live
        elif state is None and self.settings.state_dir is not None:
            state = load_local(self.settings.state_dir)
        agreed = None
        if self.link.world_size > 1:
            agreed = self._broadcast_state(state, live)
        else:
            mine = state.step if state is not None else -1
            state = self._or_checkpoint(state, mine, *self._checkpoint_hint())
            if state is not None and state is not live:
                self.apply(state)
        if live is not None:
            self._copy_after_step = (self.holds(), agreed)
        self.restored = True

    def _broadcast_state(
        self, local: TrainingState | None, live: TrainingState | None = None
    ) -> bytes | None:
        """The most advanced state on every rank; its bytes (None when nobody had state)."""
        link = self.link
        mine = local.step if local is not None else -1
        best, newest, unreadable = link.all_reduce([mine, *self._checkpoint_hint()], ReduceOp.MAX)
        local = self._or_checkpoint(local, best, newest, unreadable)
        if newest > best:  # every rank knows: rank 0 may now hold the checkpoint's state
            mine = local.step if local is not None else -1
            (best,) = link.all_reduce([mine], ReduceOp.MAX)
        if best < 0:
            return self._fresh_start()
        (src,) = link.all_reduce([link.rank if mine == best else link.world_size], ReduceOp.MIN)
        sender = src == link.rank and local is not None
        blob = local.to_bytes() if sender and local is not None else b""
        received = link.broadcast_bytes(blob, src)
        if sender and local is not None:
            if local is not live:  # what it sent is `local`: no need to read it back
                self.apply(local)
            return received
        self._apply_received(received, src)
        return received

    def _apply_received(self, blob: bytes, src: int) -> None:
        try:
            self.apply(TrainingState.from_bytes(blob))
        except StateTransferError:
            raise
        except Exception as e:
            raise StateTransferError(f"cannot apply the state from rank {src}: {e}") from e

    def _fresh_start(self) -> bytes:
        """Nobody has state (a new job): rank 0's freshly built model is everyone's.

        As DDP's start-up broadcast would make it: ranks that seeded differently, or built
        their model on a different path, still start equal.
        """
        link = self.link
        blob = self.snapshot().to_bytes() if link.rank == 0 else b""
        received = link.broadcast_bytes(blob, 0)
        if link.rank != 0:
            self._apply_received(received, 0)
        return received

    # -- durable checkpoints ----------------------------------------------------------------------

    def _checkpoint_hint(self) -> tuple[int, int]:
        """Rank 0: (the newest checkpoint's step or -1, 1 when the store cannot be read)."""
        if self.checkpointer is None or self.link.rank != 0:
            return -1, 0
        try:
            return self.checkpointer.newest_step(), 0
        except CheckpointStoreError as e:
            log.warning("cannot read the checkpoints: %s", e)
            return -1, 1

    def _or_checkpoint(
        self, local: TrainingState | None, best: int, newest: int, unreadable: int
    ) -> TrainingState | None:
        """`local`, or (rank 0) the newest usable checkpoint if past every member's `best` step.

        A job nobody has state for never starts afresh past checkpoints it cannot read: the
        trainer leaves instead (its agent leaves; the pod restarts and tries again).
        """
        if unreadable and best < 0:
            raise LeaveTraining(
                1, "no member has training state and the checkpoints cannot be read"
            )
        if newest <= best or self.link.rank != 0 or self.checkpointer is None:
            return local
        try:
            found = self.checkpointer.newest_after(best)
        except CheckpointError as e:
            raise LeaveTraining(1, f"cannot restore from the checkpoints: {e}") from e
        if found is None:
            log.warning("no usable checkpoint past step %d: continuing without one", best)
            return local
        m = found.manifest
        self.from_checkpoint = m.name
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

    def checkpoint_if_due(self) -> None:
        """Rank 0 hands a due checkpoint to the writer (never at the last step: the finish does)."""
        checkpointer = self.checkpointer
        if (
            checkpointer is not None
            and self.link.rank == 0
            and not self.sampler.done
            and checkpointer.due(self.global_step)
        ):
            checkpointer.submit(self.snapshot)

    def last_checkpoint(self, finished: bool = False) -> None:
        """Rank 0 writes the committed state before leaving (or marks the job finished)."""
        if self.checkpointer is not None and self.link.rank == 0 and self.restored:
            self.checkpointer.write_now(self.snapshot, finished=finished)
