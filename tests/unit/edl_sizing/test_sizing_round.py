"""One sizing round for the adapter and the simulator.

The round's rules (the history merge by job and class, the request rule, the rescale budget's
window, the folding of a round's measurements, the fallback plan) on their own; then the two
callers fed the same snapshots and histories: the rounds `edl-sim`'s `edl` policy ran during a
real simulation, replayed through the adapter's `Sizer`, give the same jobs and the same plans.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import edl_sim.cluster.policies.edl as edl_module
from edl_sim.cluster.cli import main as edl_sim_main
from edl_sizing import (
    ClusterSnapshot,
    Job,
    MemoryHistoryStore,
    Node,
    Reason,
    Resources,
    SizeHistory,
    SizingPolicy,
    StaticCapacitySource,
    class_key,
)
from edl_sizing.events import LogEventRecorder
from edl_sizing.sizing_round import (
    RESCALE_WINDOW_S,
    Observation,
    RoundResult,
    run_round,
    with_history,
)
from metrics_adapter.sizing.metrics import SizingMetrics
from metrics_adapter.sizing.sizer import Sizer
from tests.unit.edl_sim.cluster.helpers import inputs

pytestmark = pytest.mark.unit
GI = 2**30
NOW = 100_000.0


def job(**fields: Any) -> Job:
    return replace(
        Job("ml", "a", Resources(cpu=1, memory=GI), replicas=2, max_replicas=8), **fields
    )


def test_a_job_gets_its_own_sizes_over_its_class_and_its_sources() -> None:
    h = SizeHistory()
    klass = class_key("ml", "bert")
    h.observe(klass, 1, 10.0, NOW)
    h.observe(klass, 2, 18.0, NOW)
    h.observe("ml/a", 2, 20.0, NOW)
    seen = with_history(job(job_class="bert", observed={4: 30.0, 2: 1.0}), h, NOW)
    assert seen.observed == {1: 10.0, 2: 20.0, 4: 30.0}


def test_the_pause_is_the_jobs_then_its_classs_then_the_sources() -> None:
    h = SizeHistory()
    assert with_history(job(rescale_pause_s=7.0), h, NOW).rescale_pause_s == 7.0
    h.observe_pause(class_key("ml", "bert"), 3.0, NOW, 0)
    assert with_history(job(job_class="bert", rescale_pause_s=7.0), h, NOW).rescale_pause_s == 3.0
    h.observe_pause("ml/a", 1.5, NOW)
    assert with_history(job(job_class="bert"), h, NOW).rescale_pause_s == 1.5


@pytest.mark.parametrize(
    ("annotation", "first_measured", "replicas", "requested"),
    [(5, 3, 2, 5), (0, 3, 2, 3), (0, 0, 2, 2)],
)
def test_the_request_is_the_annotation_else_the_first_size_measured_else_replicas(
    annotation: int, first_measured: int, replicas: int, requested: int
) -> None:
    h = SizeHistory()
    if first_measured:
        h.observe("ml/a", first_measured, 10.0, NOW - 10)
        h.observe("ml/a", first_measured + 1, 12.0, NOW)
    assert with_history(job(requested=annotation, replicas=replicas), h, NOW).requested == requested


def test_rescales_count_within_the_budgets_window_and_never_below_the_sources_count() -> None:
    h = SizeHistory()
    h.observe_pause("ml/a", 1.0, NOW - RESCALE_WINDOW_S - 1, 2)  # outside the window
    h.observe_pause("ml/a", 1.0, NOW - 60, 3)
    assert with_history(job(), h, NOW).recent_rescales == 3
    assert with_history(job(recent_rescales=5), h, NOW).recent_rescales == 5


def test_an_observation_is_folded_under_the_job_and_its_class() -> None:
    h = SizeHistory()
    klass = class_key("ml", "bert")
    assert Observation("ml/a", 2, 20.0, 1.5, 2, klass).apply(h, NOW)
    assert h.observed("ml/a") == {2: 20.0} and h.observed(klass) == {2: 20.0}
    assert h.rescales_since("ml/a", NOW - 1) == 2
    assert h.rescales_since(klass, NOW - 1) == 0  # a class's pause counts no rescale
    assert h.pause(klass) == 1.5
    assert not Observation("ml/a").apply(h, NOW)


def test_a_decision_that_raises_serves_every_job_its_replicas() -> None:
    broken = SizingPolicy(headroom=None)  # type: ignore[arg-type]
    snapshot = ClusterSnapshot(
        (Node("n", Resources(cpu=8, memory=64 * GI)),), (), (job(replicas=3),)
    )
    result = run_round(snapshot, SizeHistory(), broken, NOW)
    assert result.error is not None
    (decision,) = result.plan.jobs.values()
    assert (decision.current, decision.desired, decision.limited_by) == (3, 3, Reason.FALLBACK)


@dataclass
class Recorded:
    snapshot: ClusterSnapshot
    history: SizeHistory
    policy: SizingPolicy
    now: float
    result: RoundResult


def test_the_adapters_sizer_decides_every_simulated_round_as_edl_sim_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A simulation with arrivals, growth, a finish and class history records each round's
    inputs and result; the adapter's Sizer, given each snapshot and history through its own
    capacity source and history store, decides the same jobs and the same plan."""
    rounds: list[Recorded] = []

    def recording(
        snapshot: ClusterSnapshot, history: SizeHistory, policy: SizingPolicy, now: float
    ) -> RoundResult:
        result = run_round(snapshot, history, policy, now)
        rounds.append(Recorded(snapshot, history.copy(), policy, now, result))
        return result

    monkeypatch.setattr(edl_module, "run_round", recording)
    jobs = [
        ("a", 0, 1, 4, 1, 1, "1Gi", 0, 20_000, "lin", 0),
        ("b", 300, 1, 4, 2, 1, "1Gi", 0, 8_000, "lin", 0),
        ("c", 900, 1, 4, 1, 1, "1Gi", 0, 12_000, "lin", 0),
    ]
    args = inputs(tmp_path, jobs, nodes=[("n", 1, 6, "16Gi", 0)])
    assert edl_sim_main(["run", *args, "--policy", "edl", "--json", "--quiet"]) == 0
    capsys.readouterr()
    assert len(rounds) > 20
    assert any(r.result.jobs and any(j.placed for j in r.result.jobs) for r in rounds)
    for r in rounds:
        sizer = Sizer(
            StaticCapacitySource(r.snapshot),
            MemoryHistoryStore(r.history.copy()),
            r.policy,
            SizingMetrics(CollectorRegistry()),
            LogEventRecorder(),
            functools.partial(float, r.now),
        )
        published = sizer.run_once()
        assert published is not None and sizer.last_round is not None
        assert sizer.last_round.jobs == r.result.jobs, r.now
        assert published.plan.to_dict() == r.result.plan.to_dict(), r.now
