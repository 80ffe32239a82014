"""The state hand-off's costs that grow with the state (docs/elastic.md §4.6).

The sender broadcasts its pickled state as it is (no copy) and gets it back unchanged; an
in-process re-init pickles its state once (the insurance copy, written behind while the new
world forms, and the bytes it would send), does not apply its own state back to the model it
came from, and a later save of the same state is not written twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from agent.protocol.errors import StateTransferError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import state as state_module
from agent.trainer.elastic import ElasticTrainer, ElasticTrainerSettings
from agent.trainer.frameworks import get as get_framework
from agent.trainer.frameworks.arrays import ArrayCollective
from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.recording import StepRecorder
from agent.trainer.sampler import ElasticSampler
from agent.trainer.session import TrainingSession
from agent.trainer.state import STATE_FILE, TrainingState


class Wire(ArrayCollective):
    """One rank's end of a broadcast whose root already sent (`sent`): what it was handed."""

    def __init__(self, sent: list[npt.NDArray[Any]]) -> None:
        self.sent = sent
        self.handed: list[npt.NDArray[Any]] = []

    def _all_reduce(self, values: npt.NDArray[np.int64], op: ReduceOp) -> npt.NDArray[np.int64]:
        return values

    def _broadcast(self, array: npt.NDArray[Any], src: int) -> npt.NDArray[Any]:
        self.handed.append(array)
        if len(self.sent) < len(self.handed):  # we are the root of this one
            self.sent.append(array)
            return array
        array[...] = self.sent[len(self.handed) - 1]
        return array


def test_the_sender_broadcasts_its_bytes_as_they_are_and_keeps_them() -> None:
    wire: list[npt.NDArray[Any]] = []
    sender, receiver = Wire(wire), Wire(wire)
    blob = bytes(range(256)) * 1000
    assert sender.broadcast_bytes(blob, 0) is blob
    assert np.shares_memory(sender.handed[1], np.frombuffer(blob, dtype=np.uint8))  # no copy
    assert receiver.broadcast_bytes(b"", 0) == blob
    assert receiver.handed[1].flags.writeable  # received into a buffer of its own


def test_an_empty_state_is_one_broadcast_of_its_size() -> None:
    wire: list[npt.NDArray[Any]] = []
    sender, receiver = Wire(wire), Wire(wire)
    assert sender.broadcast_bytes(b"", 0) == b"" and len(sender.handed) == 1
    assert receiver.broadcast_bytes(b"", 0) == b"" and len(receiver.handed) == 1


class DictCollective:
    """A one-rank collective whose "model" is a dict; counts the states loaded into it."""

    def __init__(self) -> None:
        self.loaded = 0
        self.fail_load = False

    def init(self, world: TrainerWorld, in_process: bool, timeout_seconds: float) -> None:
        """Nothing to form for one rank."""

    def all_reduce_ints(self, values: list[int], op: ReduceOp) -> list[int]:
        return list(values)

    def save_state(self, model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return dict(model), {}

    def load_state(self, model: Any, optimizer: Any, m: dict[str, Any], o: dict[str, Any]) -> None:
        if self.fail_load:
            model["w"] = "half"
            raise StateTransferError("torn")
        self.loaded += 1
        model.clear()
        model.update(m)


def one_rank(tmp_path: Path) -> tuple[ElasticTrainer, DictCollective, dict[str, Any]]:
    settings = ElasticTrainerSettings(state_dir=tmp_path / "state")
    collective = DictCollective()
    session = TrainingSession(TrainerWorld(), StepRecorder(), None)
    et = ElasticTrainer(session, settings, get_framework("torch"), collective)  # type: ignore[arg-type]
    model = {"w": 1}
    et.register(model, None, ElasticSampler(100, 10, 1))
    return et, collective, model


def writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every local copy written from now on."""
    written: list[bytes] = []
    real = state_module.write_local

    def spy(directory: Path, blob: bytes) -> None:
        written.append(blob)
        real(directory, blob)

    monkeypatch.setattr(state_module, "write_local", spy)
    monkeypatch.setattr("agent.trainer.elastic.write_local", spy)
    return written


def test_the_copy_of_an_in_process_world_is_its_agreed_state_written_after_its_first_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    et, collective, model = one_rank(tmp_path)
    written = writes(monkeypatch)
    loaded = collective.loaded
    et._restore(how="continues in-process", live=et._snapshot())
    assert collective.loaded == loaded  # its own state is not applied back to its model
    assert written == []  # nothing written before the new world trains
    model["w"] = 2  # the first step in the new world
    et.global_step += 1
    et._copy_behind()  # what steps() does after it: a world of one pickles its state then
    et.save()  # waits for it; the copy holds this state already: not written again
    assert len(written) == 1 and TrainingState.from_bytes(written[0]).model == {"w": 2}
    et.global_step += 1  # the next step: a new state
    et.save()
    assert len(written) == 2


def test_the_agreed_bytes_are_written_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    et, _, _ = one_rank(tmp_path)
    written = writes(monkeypatch)
    agreed = et._snapshot().to_bytes()
    et._copy_after_step = (et._holds(), agreed)  # as a restore over the wire leaves it
    et._copy_behind()
    et.save()  # waits for the copy; the state it holds is the model's: not written again
    assert written == [agreed]


def test_a_state_applied_is_saved_again_a_half_applied_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    et, collective, _ = one_rank(tmp_path)
    written = writes(monkeypatch)
    et.save()
    et.save()
    assert len(written) == 1
    peer = TrainingState(0, 2, {"w": 7}, {}, et._sampler.state_dict(), {})  # type: ignore[union-attr]
    et._apply(peer)  # same step, another state (a peer's): must be written
    et.save()
    assert len(written) == 2
    collective.fail_load = True
    with pytest.raises(StateTransferError):
        et._apply(TrainingState(0, 3, {"w": 9}, {}, {}, {}))
    et.save()  # the model is torn: the copy keeps the last whole state
    assert len(written) == 2
    copy = TrainingState.from_bytes((tmp_path / "state" / STATE_FILE).read_bytes())
    assert copy.model == {"w": 7}


def test_a_restore_from_a_copy_applies_it(tmp_path: Path) -> None:
    et, collective, _ = one_rank(tmp_path)
    loaded = collective.loaded
    et._restore(et._snapshot())  # not live (a process restart's copy): applied
    assert collective.loaded == loaded + 1
