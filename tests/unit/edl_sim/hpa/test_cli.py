"""`edl-hpa simulate` and `edl-hpa tune` run as real subprocesses on the shipped example."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "hpa"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def edl_hpa() -> list[str]:
    script = Path(sys.executable).parent / "edl-hpa"
    if script.exists():
        return [str(script)]
    found = shutil.which("edl-hpa")
    return [found] if found else [sys.executable, "-m", "edl_sim.hpa.cli"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*edl_hpa(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    assert width >= 600 and height >= 300
    assert data[-8:-4] == b"IEND"


@pytest.mark.slow
def test_simulate_prints_timeline_and_summary_and_writes_png(tmp_path: Path) -> None:
    plot = tmp_path / "sim.png"
    result = run(
        "simulate",
        str(EXAMPLE / "hpa.yaml"),
        "--trace",
        str(EXAMPLE / "trace.csv"),
        "--rescale-cost",
        "20s",
        "--plot",
        str(plot),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "legacy (no behavior)" in out
    lines = out.splitlines()
    header = next(
        line for line in lines if line.split()[:4] == ["time", "current", "desired", "target"]
    )
    assert "gpu_utilization(0.7)" in header
    assert any(line.split()[0] == "15s" for line in lines)  # first reconcile one period in
    assert not any(line.split() and line.split()[0] == "0s" for line in lines)
    assert "rescaled: pods metric gpu_utilization above target" in out
    assert "ScaleDownStabilized" in out
    assert "scale events: 11 (7 up, 4 down)" in out
    assert "training time lost to rescale pauses: 220s (11 x 20s)" in out
    assert_png(plot)


@pytest.mark.slow
def test_tune_prints_comparison_and_a_valid_manifest(tmp_path: Path) -> None:
    output = tmp_path / "recommended.yaml"
    result = run(
        "tune",
        str(EXAMPLE / "hpa.yaml"),
        "--trace",
        str(EXAMPLE / "trace.csv"),
        "--rescale-cost",
        "20s",
        "--reach-within",
        "120s",
        "--output",
        str(output),
        "--plot",
        str(tmp_path / "tuned.png"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert_png(tmp_path / "tuned.png")
    assert "objective: reach each new target within 120s" in result.stdout
    assert "figure" in result.stdout and "recommended" in result.stdout
    manifest = yaml.safe_load(output.read_text())
    assert manifest["apiVersion"] == "autoscaling/v2"
    assert manifest["spec"]["metrics"][0]["pods"]["metric"]["name"] == "gpu_utilization"
    assert set(manifest["spec"]["behavior"]) == {"scaleUp", "scaleDown"}
    assert yaml.safe_dump(manifest, sort_keys=False) in result.stdout
    # the recommendation simulates at least as well as the current HPA on the stated objective
    rescales = next(line for line in result.stdout.splitlines() if line.startswith("scale events"))
    current, recommended = (int(x) for x in rescales.split()[-2:])
    assert recommended <= current
    # and it is a manifest the simulator itself accepts
    again = run(
        "simulate", str(output), "--trace", str(EXAMPLE / "trace.csv"), "--no-plot", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["simulate", "hpa.yaml", "--trace", "trace.csv", "--bogus"],
            "unrecognized arguments: --bogus",
        ),
        (["simulate", "bad.yaml", "--trace", "trace.csv"], "bad YAML at line"),
        (["simulate", "v1.yaml", "--trace", "trace.csv"], "apiVersion: must be autoscaling/v2"),
        (
            ["simulate", "kind.yaml", "--trace", "trace.csv"],
            "kind: must be HorizontalPodAutoscaler",
        ),
        (["simulate", "hpa.yaml", "--trace", "nocols.csv"], "missing column(s): value"),
        (
            ["simulate", "hpa.yaml", "--trace", "other.csv"],
            "no samples for metric(s): gpu_utilization",
        ),
        (["simulate", "hpa.yaml"], "a trace is required"),
        (
            ["tune", "hpa.yaml", "--trace", "trace.csv", "--sync-period", "soon"],
            "--sync-period='soon': invalid duration",
        ),
        (["simulate", "missing.yaml", "--trace", "trace.csv"], "cannot read"),
    ],
)
def test_bad_input_is_one_line_on_stderr(tmp_path: Path, args: list[str], expected: str) -> None:
    shutil.copy(EXAMPLE / "hpa.yaml", tmp_path / "hpa.yaml")
    shutil.copy(EXAMPLE / "trace.csv", tmp_path / "trace.csv")
    text = (EXAMPLE / "hpa.yaml").read_text()
    (tmp_path / "bad.yaml").write_text("spec: [unclosed\n")
    (tmp_path / "v1.yaml").write_text(text.replace("autoscaling/v2", "autoscaling/v1"))
    (tmp_path / "kind.yaml").write_text(
        text.replace("kind: HorizontalPodAutoscaler", "kind: Deployment")
    )
    (tmp_path / "nocols.csv").write_text("time_seconds,metric,pod\n0,gpu_utilization,a\n")
    (tmp_path / "other.csv").write_text("time_seconds,metric,pod,value\n0,other,a,1\n")
    result = run(*args, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("edl-hpa")
    assert expected in lines[0]


def test_in_process_warning_for_tolerance_without_the_gate(tmp_path: Path) -> None:
    import io

    from edl_sim.hpa.cli import main

    manifest = tmp_path / "hpa.yaml"
    manifest.write_text(
        (EXAMPLE / "hpa.yaml").read_text() + "  behavior:\n    scaleUp:\n      tolerance: 0.05\n"
    )
    out, err = io.StringIO(), io.StringIO()
    code = main(
        [
            "simulate",
            str(manifest),
            "--trace",
            str(EXAMPLE / "trace.csv"),
            "--no-plot",
            "--duration",
            "60",
            "--no-configurable-tolerance",
        ],
        out,
        err,
    )
    assert code == 0
    assert "tolerance is ignored with --no-configurable-tolerance" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    args = ["simulate", str(manifest), "--trace", str(EXAMPLE / "trace.csv"), "--no-plot"]
    assert main([*args, "--duration", "60"], out, err) == 0  # v1.35: the gate is on
    assert err.getvalue() == ""


@pytest.mark.slow
def test_unwritable_plot_fails_before_simulating(tmp_path: Path) -> None:
    result = run(
        "simulate",
        str(EXAMPLE / "hpa.yaml"),
        "--trace",
        str(EXAMPLE / "trace.csv"),
        "--plot",
        str(tmp_path / "missing" / "p.png"),
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert "is not a directory" in result.stderr
