"""Every recorded rescale pause is the one the sample ledger shows (issue 25, item 8).

Real agents on a local membership store, real gloo on 127.0.0.1, the elastic digits example
with the sample ledger on. The sequence is the planned rescales a user lives through: three
members train, one is SIGTERMed (a scale-down), one joins (a scale-up), another is SIGTERMed,
then the job is scaled to zero. Each survivor's record (its `rescale to generation N (from M:
...): pause X s` line, the figure `edl_trainer_rescale_pause_seconds` counts) must equal the
time its trainer stood still as its own ledger lines show it, within one step
(`tests/support/pause_monitor.py`): before the fix a SIGTERM scale-down in-process was
recorded from the survivors' decision, a second after every rank had stopped.

Planned rescales lose no step: every rank stops at the same agreed boundary and the next world
restores from it, so the ledger's lineage has no rolled-back step (one trained, or begun, that
a later world's restore point left out), no sample twice and no concurrent generations. The
PyTorch restart path (a torch import per member per rescale) is `slow`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.trainer.ledger import concurrent_generations, verify
from tests.support.digits_job import NUM_TRAIN
from tests.support.elastic_soak import GLOBAL_BATCH, Soak, SoakSettings
from tests.support.pause_monitor import ledger_pause, step_starts

pytestmark = [pytest.mark.integration]

SETTLE_SECONDS = 180.0
"""Bound on each wait for the world to settle (a torch import next to busy trainers)."""


def scripted_rescales(soak: Soak) -> None:
    """Three members; SIGTERM one; join one; SIGTERM another; each after the world settled."""
    for _ in range(3):
        soak.join()
    assert soak.wait_settled(SETTLE_SECONDS), f"the first world never trained; see {soak.job.tmp}"
    for kind in ("sigterm", "join", "sigterm"):
        if kind == "join":
            soak.join()
        else:
            target = sorted(soak.alive)[0]
            soak.fire(kind, target)
            soak.alive.remove(target)
        assert soak.wait_settled(SETTLE_SECONDS), f"no settled world after {kind}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("framework", "reinit"),
    [
        ("paddle", "auto"),
        ("paddle", "process"),
        ("torch", "auto"),
        pytest.param("torch", "process", marks=pytest.mark.slow),
    ],
)
def test_each_recorded_pause_is_the_pause_the_sample_ledger_shows(
    tmp_path: Path, framework: str, reinit: str
) -> None:
    pytest.importorskip(framework)
    settings = SoakSettings(seed=0, reinit=reinit, framework=framework)
    soak = Soak(tmp_path / "job", settings)
    (tmp_path / "job").mkdir(parents=True, exist_ok=True)
    try:
        scripted_rescales(soak)
        soak.finish()
        records = soak.records()
    finally:
        soak.job.stop_all()
    starts = step_starts(soak.job.ledger)

    compared = []
    for r in records:
        measured = ledger_pause(starts, r.member, r.from_generation, r.generation)
        assert measured is not None, f"{r} has no ledger lines on both sides"
        compared.append((r, measured))
        print(
            f"{r.member} g{r.from_generation}->g{r.generation}: recorded {r.pause:.2f} s, "
            f"ledger {measured.gap:.2f} s (one step {measured.step:.2f} s)"
            + ("" if measured.bounded else "; its world's only step before: not compared")
        )
    # two scale-downs and a scale-up, each lived through by two or three survivors, each after
    # a settled world (many steps), so each comparable; the joins while the first world forms
    # may leave a world after one step, whose length no ledger line shows (pause_monitor)
    comparable = [(r, m) for r, m in compared if m.bounded]
    assert len({r.generation for r, _ in comparable}) >= 3 and len(comparable) >= 6, compared
    wrong = [(r, m) for r, m in comparable if not m.agrees_with(r.pause)]
    assert wrong == [], "recorded pauses that differ from the ledger's by more than one step"

    # No lost step: every world restored from the step the previous one stopped at.
    ledger = verify(soak.job.ledger)
    assert ledger.rolled_back_steps == 0, (
        f"planned rescales rolled back {ledger.rolled_back_steps} steps "
        f"({ledger.redone_samples} samples trained again); restores {ledger.restores}"
    )
    assert ledger.problems_so_far(NUM_TRAIN, GLOBAL_BATCH) == []
    assert concurrent_generations(soak.job.ledger) == []
