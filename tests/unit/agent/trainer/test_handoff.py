"""State hand-off and checkpoints (`StateHandoff`), and its costs that grow with the state.

The sender broadcasts its pickled state as it is (no copy) and gets it back unchanged; an
in-process re-init pickles its state once (the insurance copy, written behind while the new
world forms, and the bytes it would send), does not apply its own state back to the model it
came from, and a later save of the same state is not written twice (docs/elastic.md §4.6).
Across ranks the most advanced state wins, and a job nobody has state for does not start
afresh past checkpoints it cannot read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from agent.trainer import state as state_module
from agent.trainer.errors import LeaveTraining
from agent.trainer.frameworks.arrays import ArrayCollective
from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.handoff import StateHandoff
from agent.trainer.sampler import ElasticSampler
from agent.trainer.settings import ElasticTrainerSettings
from agent.trainer.state import STATE_FILE, TrainingState, save_local
from tests.unit.agent.trainer.helpers import DictCollective


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


class Link:
    """The world a hand-off restores in: `world_size` ranks whose states are `states`.

    This rank is `rank`; a broadcast hands out the bytes of the lowest rank holding the best
    step, as a real world would (the other ranks' steps are given, not their bytes).
    """

    def __init__(self, rank: int = 0, steps: tuple[int, ...] = (-1,), generation: int = 2) -> None:
        self.rank = rank
        self.world_size = len(steps)
        self.generation = generation
        self.steps = steps
        self.sent: list[bytes] = []
        self.peer_blob = b""

    def all_reduce(self, values: list[int], op: ReduceOp) -> list[int]:
        if len(values) == 3:  # [step, newest checkpoint, unreadable]
            return [max(values[0], *self.steps), values[1], values[2]]
        if len(values) == 1 and op is ReduceOp.MAX:
            return [max(values[0], *self.steps)]
        best = max(self.steps)
        return [min(values[0], self.steps.index(best))]

    def broadcast_bytes(self, blob: bytes, src: int) -> bytes:
        if src == self.rank:
            self.sent.append(blob)
            return blob
        return self.peer_blob


def one_rank(tmp_path: Path) -> tuple[StateHandoff, DictCollective, dict[str, Any]]:
    settings = ElasticTrainerSettings(state_dir=tmp_path / "state")
    collective = DictCollective()
    handoff = StateHandoff(Link(), collective, settings)  # type: ignore[arg-type]
    model: dict[str, Any] = {"w": 1}
    handoff.attach(model, None)
    handoff.attach_sampler(ElasticSampler(100, 10, 1))
    handoff.restore()
    return handoff, collective, model


def writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every local copy written from now on."""
    written: list[bytes] = []
    real = state_module.write_local

    def spy(directory: Path, blob: bytes) -> None:
        written.append(blob)
        real(directory, blob)

    real_save = state_module.save_local

    def save_spy(directory: Path, state: TrainingState) -> None:
        written.append(state.to_bytes())
        real_save(directory, state)

    monkeypatch.setattr(state_module, "write_local", spy)
    monkeypatch.setattr("agent.trainer.handoff.write_local", spy)
    monkeypatch.setattr("agent.trainer.handoff.save_local", save_spy)
    return written


def test_the_copy_of_an_in_process_world_is_its_agreed_state_written_after_its_first_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handoff, collective, model = one_rank(tmp_path)
    written = writes(monkeypatch)
    loaded = collective.loaded
    handoff.restore(live=handoff.snapshot())
    assert collective.loaded == loaded  # its own state is not applied back to its model
    assert written == []  # nothing written before the new world trains
    model["w"] = 2  # the first step in the new world
    handoff.global_step += 1
    handoff.copy_behind()  # what the step loop does after it: a world of one pickles it then
    handoff.save()  # waits for it; the copy holds this state already: not written again
    assert len(written) == 1 and TrainingState.from_bytes(written[0]).model == {"w": 2}
    handoff.global_step += 1  # the next step: a new state
    handoff.save()
    assert len(written) == 2


def test_a_state_applied_is_saved_again_a_half_applied_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handoff, collective, _ = one_rank(tmp_path)
    written = writes(monkeypatch)
    handoff.save()
    handoff.save()
    assert len(written) == 1
    peer = TrainingState(0, 2, {"w": 7}, {}, handoff.sampler.state_dict(), {})
    handoff.apply(peer)  # same step, another state (a peer's): must be written
    handoff.save()
    assert len(written) == 2
    collective.fail_load = True
    with pytest.raises(RuntimeError):
        handoff.apply(TrainingState(0, 3, {"w": 9}, {}, {}, {}))
    handoff.save()  # the model is torn: the copy keeps the last whole state
    assert len(written) == 2
    copy = TrainingState.from_bytes((tmp_path / "state" / STATE_FILE).read_bytes())
    assert copy.model == {"w": 7}


def test_a_restore_from_a_copy_applies_it(tmp_path: Path) -> None:
    handoff, collective, _ = one_rank(tmp_path)
    loaded = collective.loaded
    handoff.restore(handoff.snapshot())  # not live (a process restart's copy): applied
    assert collective.loaded == loaded + 1


def test_nothing_is_saved_before_the_state_of_the_world_is_agreed(tmp_path: Path) -> None:
    """A freshly built model must not overwrite a survivor's copy before the hand-off."""
    settings = ElasticTrainerSettings(state_dir=tmp_path / "state")
    handoff = StateHandoff(Link(), DictCollective(), settings)  # type: ignore[arg-type]
    handoff.attach({"w": 1}, None)
    handoff.attach_sampler(ElasticSampler(100, 10, 1))
    handoff.save()
    assert not (tmp_path / "state" / STATE_FILE).exists()


def test_a_process_restart_resumes_from_its_local_copy(tmp_path: Path) -> None:
    """The copy on disk (the last agreed stop) is the state of a world of one."""
    state_dir = tmp_path / "state"
    sampler = ElasticSampler(100, 10, 1)
    sampler.advance(sampler.plan(0, 1))  # type: ignore[arg-type]
    save_local(state_dir, TrainingState(7, 3, {"w": 5}, {}, sampler.state_dict(), {"lr": 0.1}))
    collective: Any = DictCollective()
    handoff = StateHandoff(Link(), collective, ElasticTrainerSettings(state_dir=state_dir))
    model: dict[str, Any] = {"w": 1}
    handoff.attach(model, None)
    handoff.attach_sampler(ElasticSampler(100, 10, 1))
    handoff.restore()
    assert (handoff.global_step, model, handoff.extra) == (7, {"w": 5}, {"lr": 0.1})
    assert handoff.sampler.consumed == 10


def test_a_joiner_takes_the_most_advanced_peers_state(tmp_path: Path) -> None:
    """Rank 1 of 3 with no state; rank 2 holds step 9: its bytes are applied here."""
    sampler = ElasticSampler(100, 10, 1)
    peer = TrainingState(9, 5, {"w": 42}, {}, sampler.state_dict(), {})
    link = Link(rank=1, steps=(4, -1, 9))
    link.peer_blob = peer.to_bytes()
    handoff = StateHandoff(link, DictCollective(), ElasticTrainerSettings())  # type: ignore[arg-type]
    model: dict[str, Any] = {"w": 1}
    handoff.attach(model, None)
    handoff.attach_sampler(ElasticSampler(100, 10, 1))
    handoff.restore()
    assert (handoff.global_step, model) == (9, {"w": 42})
    assert link.sent == []  # it only received


def test_no_state_and_unreadable_checkpoints_leave_instead_of_starting_afresh(
    tmp_path: Path,
) -> None:
    class Unreadable:
        def newest_step(self) -> int:
            from agent.checkpoints.errors import CheckpointStoreError

            raise CheckpointStoreError("the volume is gone")

    collective: Any = DictCollective()
    checkpointer: Any = Unreadable()
    handoff = StateHandoff(Link(), collective, ElasticTrainerSettings(), checkpointer)
    handoff.attach({"w": 1}, None)
    handoff.attach_sampler(ElasticSampler(100, 10, 1))
    with pytest.raises(LeaveTraining) as left:
        handoff.restore()
    assert left.value.status == 1 and "cannot be read" in left.value.why


def test_a_fresh_job_of_several_ranks_starts_from_rank_0s_model() -> None:
    """Nobody has state: rank 0's freshly built model is everyone's (as DDP's broadcast)."""
    sampler = ElasticSampler(100, 10, 1)
    rank0 = TrainingState(0, 2, {"w": 3}, {}, sampler.state_dict(), {})
    link = Link(rank=1, steps=(-1, -1))
    link.peer_blob = rank0.to_bytes()
    collective: Any = DictCollective()
    handoff = StateHandoff(link, collective, ElasticTrainerSettings())
    model: dict[str, Any] = {"w": 1}  # built differently here
    handoff.attach(model, None)
    handoff.attach_sampler(ElasticSampler(100, 10, 1))
    handoff.restore()
    assert (handoff.global_step, model) == (0, {"w": 3})
    sender = StateHandoff(Link(rank=0, steps=(-1, -1)), collective, ElasticTrainerSettings())
    sender.attach({"w": 3}, None)
    sender.attach_sampler(ElasticSampler(100, 10, 1))
    sender.restore()
    assert [TrainingState.from_bytes(b).model for b in sender.link.sent] == [{"w": 3}]  # type: ignore[attr-defined]


def test_a_local_copy_reads_back_as_the_state_saved(tmp_path: Path) -> None:
    import numpy as np

    from agent.trainer.state import load_local

    weights = np.arange(300_000, dtype=np.float32).reshape(600, 500)  # beyond a pickle frame
    state = TrainingState(7, 3, {"w": weights}, {"m": weights[::2]}, {"epoch": 1}, {"lr": 0.1})
    save_local(tmp_path, state)
    assert (tmp_path / STATE_FILE).read_bytes() == state.to_bytes()
    back = load_local(tmp_path)
    assert back is not None and back.step == 7 and back.extra == {"lr": 0.1}
    assert np.array_equal(back.model["w"], weights)
    assert np.array_equal(back.optimizer["m"], weights[::2])
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]  # no temporary file left
