"""The shipped scenarios: generated deterministically, shipped as generated, and they all run."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest

from edl_sim.cluster import load_workload, scenarios
from edl_sim.cluster.cli import main

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "cluster"


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_shipped_files_are_what_the_generator_writes(name: str, tmp_path: Path) -> None:
    written = scenarios.write(name, tmp_path)
    assert written
    for path in written:
        shipped = EXAMPLES / name / path.name
        assert shipped.read_text() == path.read_text(), f"regenerate {shipped}"
    assert scenarios.SCENARIOS[name].generate() == scenarios.SCENARIOS[name].generate()


def test_philly_sizes_and_durations() -> None:
    durations = [scenarios.philly_duration(u / 1000) for u in range(1, 1000)]
    assert scenarios.philly_duration(0.5) == pytest.approx(scenarios.PHILLY_MEDIAN_S)
    assert scenarios.philly_duration(0.9) == pytest.approx(scenarios.PHILLY_P90_S)
    assert scenarios.philly_duration(0.99) == pytest.approx(scenarios.PHILLY_P99_S)
    assert durations == sorted(durations)
    assert max(durations) <= scenarios.PHILLY_CAP_S


@pytest.mark.slow
def test_every_scenario_runs_under_every_policy() -> None:
    """All jobs finish and the figures are in range (their speed is measured in bench/)."""
    for name, scenario in sorted(scenarios.SCENARIOS.items()):
        folder = EXAMPLES / name
        args = ["run", "--quiet", "--json"]
        for part in ("workload", "curves", "cluster", "background"):
            if (folder / f"{part}.csv").exists():
                args += [f"--{part}", str(folder / f"{part}.csv")]
        if scenario.window:
            args += ["--window", str(scenario.window)]
        out, err = io.StringIO(), io.StringIO()
        assert main(args, out, err) == 0, err.getvalue()
        result = json.loads(out.getvalue())
        assert set(result["policies"]) == {
            "static", "hpa-throughput", "edl-2018", "edl", "tiresias", "optimus"
        }  # fmt: skip
        for policy, f in result["policies"].items():
            where = f"{name}/{policy}"
            assert f["jobs_finished"] == f["jobs"], where
            assert 0 < f["utilisation_mean"] <= 1, where
            assert f["pending_mean_s"] >= 5, where  # the start delay
            assert f["jct_mean_s"] >= f["pending_mean_s"], where
        assert result["policies"]["static"]["rescales"] == 0


@pytest.mark.parametrize("name", ["edl2018-case2", "gpu-philly"])
def test_the_world_between_measured_points_follows_the_points(name: str) -> None:
    """Between two measured sizes a job trains on the straight line between them: never
    beyond its neighbours, whatever the sizer's model says (the world is not the model)."""
    folder = EXAMPLES / name
    workload = load_workload(
        folder / "workload.csv", folder / "curves.csv", folder / "cluster.csv",
        folder / "background.csv" if (folder / "background.csv").exists() else None,
    )  # fmt: skip
    for curve_name, curve in workload.curves.items():
        sizes = sorted(curve.points)
        for low, high in itertools.pairwise(sizes):
            x0, x1 = curve.points[low], curve.points[high]
            for n in range(low + 1, high):
                expected = x0 + (x1 - x0) * (n - low) / (high - low)
                assert curve.throughput(n) == pytest.approx(expected), (curve_name, n)
