"""What `edl-sim run` prints: the table, the JSON object and the plot."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from edl_sim.cluster.cli import main
from edl_sim.cluster.report import quantile
from tests.unit.edl_sim.cluster.helpers import inputs

JOBS = [
    ("a", 0, 1, 4, 2, 1, "1Gi", 0, 1000, "lin", 0),
    ("b", 10, 1, 4, 4, 1, "1Gi", 0, 720, "lin", 0),
]
DOCUMENTED = {
    "jct_mean_s", "jct_p50_s", "jct_p99_s", "pending_mean_s", "pending_p99_s",
    "utilisation_mean", "utilisation_off_peak", "rescales", "makespan_s",
}  # fmt: skip


def _run(args: list[str]) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", *args], out, err) == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def test_json_of_one_policy_is_one_flat_object(tmp_path: Path) -> None:
    out, _ = _run([*inputs(tmp_path, JOBS), "--policy", "static", "--json", "--quiet"])
    result = json.loads(out)
    assert DOCUMENTED <= set(result)
    assert result["policy"] == "static"
    assert result["jct_mean_s"] == pytest.approx(61.5)
    assert result["makespan_s"] == pytest.approx(78)


def test_json_of_several_policies_has_ratios_to_static(tmp_path: Path) -> None:
    out, _ = _run([*inputs(tmp_path, JOBS), "--policy", "static,edl-2018", "--json", "--quiet"])
    result = json.loads(out)
    assert set(result["policies"]) == {"static", "edl-2018"}
    ratios = result["ratios_to_static"]
    assert ratios["static"]["jct_mean_s"] == 1
    jct = result["policies"]["edl-2018"]["jct_mean_s"] / result["policies"]["static"]["jct_mean_s"]
    assert ratios["edl-2018"]["jct_mean_s"] == pytest.approx(jct, abs=1e-4)


def test_table_plot_and_progress(tmp_path: Path) -> None:
    plot = tmp_path / "out.png"
    out, err = _run([*inputs(tmp_path, JOBS), "--plot", str(plot)])
    header = out.splitlines()[0].split()
    policies = ["static", "hpa-throughput", "edl-2018", "edl", "tiresias", "optimus"]
    assert header == ["figure", *policies]
    assert "(x" in out  # ratios to static
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "edl-sim: edl: done at t=" in err


def test_quantile_interpolates() -> None:
    assert quantile([], 0.5) is None
    assert quantile([1.0, 3.0], 0.5) == 2.0
    assert quantile([5.0, 1.0, 3.0], 0.99) == pytest.approx(4.96)
