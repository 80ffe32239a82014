"""The training state handed from one generation to the next: model, optimizer, sampler, step.

Survivors keep a local copy (written atomically at every planned stop, after a collective
failure, and every few seconds as a bound on loss); after the new collective is up, the rank
with the most progress (rank 0 on ties: a survivor, since survivors keep their order) sends its
copy to everyone as one byte buffer, so joiners need no shared storage.
"""

from __future__ import annotations

import logging
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.protocol.errors import StateTransferError

log = logging.getLogger(__name__)

STATE_FILE = "state.pkl"


@dataclass(frozen=True)
class TrainingState:
    """A committed point of training."""

    step: int
    """Global steps completed."""
    generation: int
    """Generation that committed it."""
    model: dict[str, Any]
    optimizer: dict[str, Any]
    sampler: dict[str, Any]
    extra: dict[str, Any]

    def to_bytes(self) -> bytes:
        """Pickled (the framework has already turned its tensors into numpy arrays)."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, blob: bytes) -> TrainingState:
        """Inverse of `to_bytes`."""
        try:
            state = pickle.loads(blob)  # written by our own trainers only
        except Exception as e:
            raise StateTransferError(f"cannot read training state: {e}") from e
        if not isinstance(state, cls):
            raise StateTransferError(f"not a training state: {type(state).__name__}")
        return state


def save_local(directory: Path, state: TrainingState) -> None:
    """Atomically replaces this member's local copy."""
    write_local(directory, state.to_bytes())


def write_local(directory: Path, blob: bytes) -> None:
    """Atomically replaces this member's local copy with `blob` (`TrainingState.to_bytes`).

    One writer at a time per process (the temporary file is named after the process).
    """
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{STATE_FILE}.{os.getpid()}"
    try:
        tmp.write_bytes(blob)
        os.replace(tmp, directory / STATE_FILE)
    except OSError as e:
        raise StateTransferError(f"cannot save training state in {directory}: {e}") from e


def load_local(directory: Path) -> TrainingState | None:
    """This member's local copy, or None (a joiner, or an unreadable copy, logged)."""
    path = directory / STATE_FILE
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("ignoring local training state %s: %s", path, e)
        return None
    try:
        return TrainingState.from_bytes(blob)
    except StateTransferError as e:
        log.warning("ignoring local training state %s: %s", path, e)
        return None
