"""Durable checkpoints from inside the trainer: rank 0 of each generation writes, off the loop.

At a step boundary that is due (every N steps and/or every T seconds, whichever first) rank 0
copies the committed state to memory (the framework's `save_state`, plus a copy of any array
that is still a view of a tensor: the only part the training thread waits for) and hands it
to a writer thread, which serialises and hashes it, writes payload then manifest
(`agent.checkpoints.catalogue`) and prunes to the last K. A checkpoint that comes due while
the previous one is still being written waits for the next boundary. On restore, rank 0
reads the newest checkpoint that verifies (falling back past corrupt or partial ones, each
logged and counted) and `ElasticTrainer` hands it to every rank like a survivor's state. The
other ranks of a generation never touch the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agent.checkpoints.catalogue import Checkpoints, Manifest
from agent.checkpoints.errors import CheckpointError, CheckpointInvalid, CheckpointStoreError
from agent.checkpoints.settings import CheckpointSettings
from agent.checkpoints.stats import CheckpointStats, stats_path
from agent.protocol import env as names
from agent.protocol.errors import StateTransferError
from agent.trainer.state import TrainingState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    """A state read back from a checkpoint, with the manifest it was found under."""

    manifest: Manifest
    state: TrainingState


def owned(value: Any) -> Any:
    """`value` with every numpy array that is a view (of a live tensor, possibly) copied.

    A framework's `save_state` may hand out views (torch's ``.numpy()`` of a CPU tensor) or
    copies (Paddle's); an optimizer step would change a view while the writer serialises it.
    """
    if isinstance(value, np.ndarray):
        return value if value.flags.owndata else value.copy()
    if isinstance(value, dict):
        return {k: owned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(owned(v) for v in value)
    return value


def detached(state: TrainingState) -> TrainingState:
    """`state` sharing no memory with the live model and optimizer (see `owned`)."""
    return replace(state, model=owned(state.model), optimizer=owned(state.optimizer))


class Checkpointer:
    """One trainer's view of its job's checkpoints: when to write, the writer, the reader."""

    def __init__(
        self,
        checkpoints: Checkpoints,
        settings: CheckpointSettings,
        framework: str,
        stats: CheckpointStats,
        writer: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.checkpoints = checkpoints
        self.settings = settings
        self.stats = stats
        self._framework = framework
        self._writer = writer
        self._clock = clock
        self._since_step = 0
        self._since = clock()
        self._inflight: threading.Thread | None = None
        self._written_step = -1

    @classmethod
    def from_env(cls, env: Mapping[str, str], framework: str) -> Checkpointer | None:
        """The checkpointer ``EDL_CHECKPOINT_*`` describe (None without a URL)."""
        settings = CheckpointSettings.from_env(env)
        if not settings.enabled:
            return None
        metrics_dir = env.get(names.METRICS_DIR, "").strip()
        incarnation = int(env.get(names.INCARNATION, "0") or "0")
        stats = CheckpointStats(stats_path(Path(metrics_dir), incarnation) if metrics_dir else None)
        store = settings.store(env.get(names.JOB, "").strip())
        checkpoints = Checkpoints(store, on_invalid=lambda _name, _why: stats.invalid())
        return cls(checkpoints, settings, framework, stats, env.get(names.MEMBER, ""))

    @property
    def url(self) -> str:
        """Where this job's checkpoints live."""
        return self.checkpoints.store.url

    # -- writing -------------------------------------------------------------------------------

    def restart_cadence(self, step: int) -> None:
        """Counts the next interval from `step`, now (after a restore or a write)."""
        self._since_step, self._since = step, self._clock()

    def due(self, step: int) -> bool:
        """True when a checkpoint of `step` is due and no write is in flight."""
        if self._inflight is not None and self._inflight.is_alive():
            return False
        s = self.settings
        by_steps = s.every_steps > 0 and step - self._since_step >= s.every_steps
        by_time = s.every_seconds > 0 and self._clock() - self._since >= s.every_seconds
        return by_steps or by_time

    def submit(self, snapshot: Callable[[], TrainingState]) -> None:
        """Copies the state now (training thread) and writes it on a writer thread."""
        started = time.perf_counter()
        state = detached(snapshot())
        stall = time.perf_counter() - started
        self.restart_cadence(state.step)
        self._inflight = threading.Thread(
            target=self._write,
            args=(state, started, stall, False),
            name="edl-checkpoint-writer",
            daemon=True,  # a trainer that exits abandons a write: the previous one stays usable
        )
        self._inflight.start()

    def write_now(
        self, snapshot: Callable[[], TrainingState], finished: bool = False, timeout: float = 60.0
    ) -> Manifest | None:
        """Writes a checkpoint in the calling thread (the last one before leaving, the finish).

        A write in flight is waited for first (bounded). None when the write failed, or when
        the newest checkpoint this trainer wrote already holds this step (and no finish).
        """
        if not self.wait(timeout):
            log.warning("a checkpoint write is still running after %.0f s", timeout)
        started = time.perf_counter()
        state = snapshot()
        if state.step == self._written_step and not finished:
            return None
        return self._write(state, started, time.perf_counter() - started, finished)

    def wait(self, timeout: float) -> bool:
        """Waits for the write in flight; False when it is still running after `timeout`."""
        inflight = self._inflight
        if inflight is not None:
            inflight.join(timeout)
            return not inflight.is_alive()
        return True

    def _write(
        self, state: TrainingState, started: float, stall: float, finished: bool
    ) -> Manifest | None:
        try:
            manifest = self.checkpoints.write(
                state.to_bytes(),
                step=state.step,
                generation=state.generation,
                epoch=int(state.sampler.get("epoch", 0)),
                consumed=int(state.sampler.get("consumed", 0)),
                framework=self._framework,
                finished=finished,
                writer=self._writer,
            )
        except CheckpointStoreError as e:
            log.error("checkpoint of step %d not written: %s", state.step, e)
            self.stats.failed()
            return None
        seconds = time.perf_counter() - started
        self._written_step = manifest.step
        nbytes = manifest.size + len(manifest.to_json())
        self.stats.wrote(manifest.step, manifest.written_at, nbytes, seconds, stall)
        log.info(
            "checkpoint %s: step %d, %d bytes, %.3f s (%.3f s on the training thread)%s",
            manifest.name,
            manifest.step,
            manifest.size,
            seconds,
            stall,
            "; the job is finished" if finished else "",
        )
        try:
            self.checkpoints.prune(self.settings.keep)
        except CheckpointStoreError as e:
            log.warning("pruning checkpoints in %s: %s", self.url, e)
        return manifest

    # -- reading -------------------------------------------------------------------------------

    def newest_step(self) -> int:
        """The step of the newest committed checkpoint (-1: none); a cheap manifest read.

        Raises:
            CheckpointStoreError: the store cannot be read.
        """
        latest = self.checkpoints.latest()
        return -1 if latest is None else latest.step

    def newest_after(self, step: int) -> Restored | None:
        """The newest usable checkpoint if it is past `step` (verified; corrupt ones skipped).

        Raises:
            CheckpointStoreError: the store cannot be read.
            CheckpointError: the checkpoint was written by another framework (not loadable).
        """
        found = self.checkpoints.newest_usable(self._decode, newer_than=step)
        if found is None:
            return None
        manifest, state = found
        self.stats.restored(manifest.step, manifest.written_at)
        self.restart_cadence(manifest.step)
        return Restored(manifest, state)

    def _decode(self, manifest: Manifest, payload: bytes) -> TrainingState:
        if manifest.framework != self._framework:
            raise CheckpointError(
                f"checkpoint {manifest.name} in {self.url} holds {manifest.framework} state; "
                f"this trainer trains with {self._framework} (use another job name or URL)"
            )
        try:
            state = TrainingState.from_bytes(payload)
        except StateTransferError as e:
            raise CheckpointInvalid(str(e)) from e
        if state.step != manifest.step:
            raise CheckpointInvalid(f"payload holds step {state.step}, not {manifest.step}")
        return state
