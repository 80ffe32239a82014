"""The ledger's lineage across a restore from a durable checkpoint: what came after it is redone."""

from __future__ import annotations

from pathlib import Path

from agent.trainer.ledger import SampleLedger, verify

SAMPLES = 8  # one epoch: 4 steps of 2 samples, trained by 2 ranks (one sample each)


def train(ledger: Path, gen: int, member: str, start: int, stop: int, **restore: str) -> None:
    """Generation `gen` restores at `start` and begins steps start..stop-1 (2 ranks)."""
    for rank in (0, 1):
        book = SampleLedger(ledger, f"{member}{rank}", gen, rank)
        if rank == 0:
            book.restored(start, **restore)
        for step in range(start, stop):
            epoch, at = divmod(step, SAMPLES // 2)
            book.intent(step, epoch, [2 * at + rank])
        book.close()


def test_a_restore_from_a_checkpoint_redoes_the_steps_after_it(tmp_path: Path) -> None:
    train(tmp_path, 1, "a", 0, 7)  # every pod killed while step 6 ran; checkpoint at step 3
    train(tmp_path, 2, "c", 3, 8, checkpoint="ckpt-0000000001-g000001-s0000000003")
    report = verify(tmp_path)
    assert report.problems(SAMPLES, 2) == []
    assert report.steps == 8 and report.restores == {1: 0, 2: 3}
    assert report.checkpoints == {2: "ckpt-0000000001-g000001-s0000000003"}
    assert report.rolled_back_steps == 4  # steps 3, 4, 5, 6 of generation 1
    assert report.redone_samples == 8 and report.unaccounted_redone() == []
    assert sorted(report.redone[0]) == [6, 7] and sorted(report.redone[1]) == [0, 1, 2, 3, 4, 5]


def test_a_restore_may_go_back_past_the_previous_generations_start(tmp_path: Path) -> None:
    """Generation 2 restored at 5 (a survivor), 3 from an older checkpoint at 2: the lineage
    drops generation 2's steps and generation 1's from step 2 on."""
    train(tmp_path, 1, "a", 0, 5)
    train(tmp_path, 2, "b", 5, 6)
    train(tmp_path, 3, "c", 2, 8, checkpoint="ckpt-0000000001-g000001-s0000000002")
    report = verify(tmp_path)
    assert report.problems(SAMPLES, 2) == []
    assert report.steps == 8 and report.rolled_back_steps == 4


def test_going_back_without_a_checkpoint_or_never_redoing_is_a_problem(tmp_path: Path) -> None:
    train(tmp_path, 1, "a", 0, 4)
    train(tmp_path, 2, "b", 4, 6)
    train(tmp_path, 3, "c", 2, 4)  # back past generation 2's start, from no checkpoint; stops
    problems = verify(tmp_path).problems(SAMPLES, 2)
    assert any("restored step went back" in p for p in problems)
    assert any("rolled-back samples never trained again" in p for p in problems)
