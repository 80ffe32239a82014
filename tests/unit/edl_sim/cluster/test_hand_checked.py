"""Two jobs on one node, every event and the final figures computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from edl_sim.cluster import PolicySettings, SimSettings, Simulation, load_workload
from edl_sim.cluster.engine import SimResult
from edl_sim.cluster.jobs import PauseModel
from edl_sim.cluster.policies import POLICIES
from edl_sim.cluster.report import figures
from tests.unit.edl_sim.cluster.helpers import inputs

FIXED_PAUSES = PauseModel(up=(1.0, 1.0), down=(0.5, 0.5))


def _run(tmp_path: Path, policy: str, jobs: list[tuple[object, ...]]) -> SimResult:
    args = inputs(tmp_path, jobs)
    workload = load_workload(Path(args[1]), Path(args[3]), Path(args[5]))
    settings = SimSettings(start_delay=5.0, pauses=FIXED_PAUSES)
    return Simulation(workload, POLICIES[policy](PolicySettings()), settings).run()


def test_static_fifo_two_jobs_one_node(tmp_path: Path) -> None:
    """Node: 4 CPU, 8 Gi. Curve: 10 samples/s per worker (measured at 1-4). Start delay 5 s.

    a: submitted at 0, 2 workers (1 CPU, 1 Gi each), 1000 samples.
    b: submitted at 10, 4 workers, 720 samples.

    t=0   a fits (2 of 4 CPU): both pods bound.        t=5   a Running: world 2, 20 samples/s.
    t=10  b needs 4 CPU, 2 free: it waits (FIFO).      t=55  a done (1000 / 20 = 50 s after 5);
          its pods go, b fits: 4 pods bound.           t=60  b Running: world 4, 40 samples/s.
    t=78  b done (720 / 40 = 18 s after 60).

    JCT a = 55, b = 68 (mean 61.5); pending a = 5, b = 50; makespan 78; no rescales.
    CPU requested by Running pods: 2 over 5..55, 4 over 60..78 = 100 + 72 = 172 CPU-s of
    78 s x 4 CPU = 312: utilisation 55.13%.
    """
    result = _run(
        tmp_path,
        "static",
        [
            ("a", 0, 1, 4, 2, 1, "1Gi", 0, 1000, "lin", 0),
            ("b", 10, 1, 4, 4, 1, "1Gi", 0, 720, "lin", 0),
        ],
    )
    a, b = result.jobs
    assert a.worlds == ((5.0, 2),)
    assert b.worlds == ((60.0, 4),)
    assert (a.started, a.finished, b.started, b.finished) == pytest.approx((5, 55, 60, 78))
    f = figures(result)
    assert f.jct_mean_s == pytest.approx(61.5)
    assert f.pending_mean_s == pytest.approx(27.5)
    assert f.makespan_s == pytest.approx(78)
    assert f.utilisation_mean == pytest.approx(172 / 312)
    assert f.rescales == 0
    assert f.rescale_lost_s == 0


def test_edl_2018_rule_two_jobs_one_node(tmp_path: Path) -> None:
    """The 2018 rule, 5 s loop, max_load_desired 0.97 (3.88 of 4 CPU). Pauses: 1 s up, 0.5 s down.

    a: submitted at 0, 1-4 workers (asks 1), 2000 samples. b: at 12, 1-4 (asks 1), 600 samples.

    t=0   a's pod bound.                              t=5   a Running: world 1 (starts, no pause).
    t=5   loop: a fully Running, used 1 CPU: up +1 (used 2, 3.88 - 2 >= 1), +1 (used 3),
          then 3.88 - 3 < 1: stop. a -> 3.        t=10  two pods Running: world 1 -> 3,
          paused to 11 (a has 50 samples).            t=12  b's pod bound on the last CPU.
    t=15  loop: b's only pod is Pending, so every job may be resized; used 4 > 3.88. Order by
          fulfillment: b (0), a ((3-1)/3). Up: no node has an idle CPU. Down (a first): a
          -1 (used 3), then nothing. a -> 2: its newest pod goes, world 3 -> 2, paused to
          15.5 (a has 50 + 4 x 30 = 170).         t=17  b Running: world 1 (starts).
    t=20..75  loops: used 3, 3.88 - 3 < 1: nothing. t=77  b done (600 / 10 = 60 s after 17).
    t=80  loop: used 2: a +1 -> 3 (a has 170 + 64.5 x 20 = 1460). t=85 world 2 -> 3, paused to
          86 (a has 1560); 440 left at 30/s: done at 86 + 14.667 = 100.667.

    JCT a = 100.667, b = 65; pending a = 5, b = 5; rescales: a 3 (lost 2.5 s), b 0.
    CPU of Running pods: 1 over 5..10, 3 over 10..15, 2 over 15..17, 3 over 17..77, 2 over
    77..85, 3 over 85..100.667 = 5 + 15 + 4 + 180 + 16 + 47 = 267 CPU-s of 4 x 100.667.
    """
    result = _run(
        tmp_path,
        "edl-2018",
        [
            ("a", 0, 1, 4, 1, 1, "1Gi", 0, 2000, "lin", 0),
            ("b", 12, 1, 4, 1, 1, "1Gi", 0, 600, "lin", 0),
        ],
    )
    a, b = result.jobs
    assert a.worlds == ((5.0, 1), (10.0, 3), (15.0, 2), (85.0, 3))
    assert b.worlds == ((17.0, 1),)
    assert a.finished == pytest.approx(100 + 2 / 3)
    assert b.finished == pytest.approx(77)
    assert (a.rescales, b.rescales) == (3, 0)
    assert a.lost_s == pytest.approx(2.5)
    f = figures(result)
    assert f.jct_mean_s == pytest.approx((100 + 2 / 3 + 65) / 2)
    assert f.pending_mean_s == pytest.approx(5)
    assert f.utilisation_mean == pytest.approx(267 / (4 * (100 + 2 / 3)))
