"""A seeded soak: >= 20 scale events, some mid-rescale, in both re-init modes (issue 19).

Paddle in both modes, PyTorch in-process; and in-process the two data-parallel examples
(issue 36: two DataLoader workers per rank; PyTorch's DDP rebuilt on each world's group,
Paddle's bucketed all-reduce on it).

Joins, SIGTERMs, trainer / agent / whole-pod SIGKILLs and a SIGSTOPped trainer, against real
agents and real gloo (`tests/support/elastic_soak.py` drives it). After the sequence the
job is scaled to zero (a clean stop), and what a user would check must hold:

- every sample of every completed epoch trained exactly once in the lineage of the model,
  the current epoch without a repeat, the restored step never going back (the digits test
  trains a job to its end and checks the accuracy of one process);
- every world change has a recorded pause on every member that lived through it;
- no recorded pause above `PAUSE_BOUND` (docs/elastic.md: the bounds, and how they add up);
- never two generations training at the same time (no orphan or stale world trains on).

The distributions (inside: recorded pauses; outside: action -> first step reflecting it)
are printed; speed itself is measured in bench/bench_rescale.py, never asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.digits_job import FRAMEWORK_OF
from tests.support.elastic_soak import SoakSettings, report, run_soak

EVENTS = 22
PAUSE_BOUND = 75.0
"""Seconds. The worst path a soak can take: a crash found by the heartbeat TTL (4 s here),
a member stuck in its framework's group formation given the drain timeout (30 s), then a
process restart (import + rendezvous, ~3 s idle, up to ~20 s on a loaded 2-core machine);
docs/elastic.md derives it. The measured maximum is far below (see the test's output)."""


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("framework", "reinit"),
    # PyTorch on the restart path is left out: every rescale there starts a torch process
    # (import torch + torch._dynamo, 15-20 s next to busy trainers on 2 cores), which would
    # make this sequence take some 7 minutes; its mechanics are the Paddle restart path's.
    # The data-parallel scripts (DataLoader workers on): DDP's (rebuilt on every world's
    # group, a weighting hook, gradients as bucket views) and Paddle's bucketed all-reduce.
    [
        ("paddle", "auto"),
        ("paddle", "process"),
        ("torch", "auto"),
        ("torch-ddp", "auto"),
        ("paddle-dp", "auto"),
    ],
)
def test_a_seeded_sequence_of_scale_events_keeps_every_guarantee(
    tmp_path: Path, framework: str, reinit: str
) -> None:
    pytest.importorskip(FRAMEWORK_OF[framework])
    settings = SoakSettings(seed=19, reinit=reinit, framework=framework, events=EVENTS)
    result = run_soak(tmp_path / "soak", settings)
    print(report(result))

    assert len(result.actions) >= 20, "the job ended before the sequence did"
    assert any(a.mid_rescale and a.kind != "join" for a in result.actions)
    assert result.ledger_problems == [] and result.steps > 0
    assert result.missing_records == [], "a world change without a recorded pause"
    assert result.inside(), "no rescale recorded at all"
    assert max(result.inside()) <= PAUSE_BOUND
    assert result.concurrent == [], "two generations trained at the same time"
