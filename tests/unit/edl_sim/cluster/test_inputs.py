"""Bad input files end in one line on stderr and exit status 1; bad flags in exit status 2."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from edl_sim.cluster.cli import main
from edl_sim.cluster.inputs import PLACEMENT_COLUMNS, Curve, load_workload
from tests.unit.edl_sim.cluster.helpers import inputs, write_csv

JOB = ("a", 0, 1, 4, 2, 1, "1Gi", 0, 1000, "lin", 0)


def _fails(args: list[str]) -> str:
    """The one stderr line of a run that must fail with exit status 1 and print nothing."""
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", *args, "--quiet"], out, err) == 1
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("edl-sim: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (("a", 0, 3, 2, 2, 1, "1Gi", 0, 1000, "lin", 0), "max_workers 2 is below min_workers 3"),
        (("a", 0, 1, 4, 5, 1, "1Gi", 0, 1000, "lin", 0), "requested_workers 5 is outside"),
        (("a", 0, 1, 4, 2, 1, "1Gi", 0, 1000, "nope", 0), "curve 'nope' is not in the curves"),
        (("a", -1, 1, 4, 2, 1, "1Gi", 0, 1000, "lin", 0), "submit_seconds '-1' must be"),
        (("a", 0, 1, 4, 2, 1, "1Gi", 0, 0, "lin", 0), "work_samples '0' must be a finite"),
        (("a", 0, 1, 4, 2, 1, "lots", 0, 1000, "lin", 0), "memory: "),
        (("a", 0, 1, 4, 2, 0, "0", 0, 1000, "lin", 0), "a worker requests no cpu"),
        (("A_b", 0, 1, 4, 2, 1, "1Gi", 0, 1000, "lin", 0), "must be a lower-case DNS label"),
        (("a", 0, 1, 4, 2, 1, "1Gi", 0, 1000, "lin", "high"), "priority 'high' is not an integer"),
        (("a", 0, 1, 8, 8, 1, "1Gi", 0, 1000, "lin", 0), "8 requested workers"),
    ],
)
def test_bad_workload_rows(tmp_path: Path, job: tuple[object, ...], message: str) -> None:
    line = _fails(inputs(tmp_path, [job]))
    assert message in line
    if "requested workers" not in message:
        assert "workload.csv line 2" in line


def test_a_job_twice(tmp_path: Path) -> None:
    assert "job 'a' appears twice" in _fails(inputs(tmp_path, [JOB, JOB]))


def test_workload_header_problems(tmp_path: Path) -> None:
    args = inputs(tmp_path, [JOB])
    Path(args[1]).write_text("name,submit_seconds,colour\na,0,red\n")
    line = _fails(args)
    assert "workload.csv line 1: missing column(s) min_workers" in line
    assert "unknown column(s) colour" in line
    Path(args[1]).write_text("# only a comment\n\n")
    assert "empty file (expected a header" in _fails(args)


def test_a_short_row(tmp_path: Path) -> None:
    args = inputs(tmp_path, [JOB])
    with Path(args[1]).open("a") as f:
        f.write("b,0,1\n")
    assert "workload.csv line 3: 3 fields, the header has 11" in _fails(args)


def test_bad_curves(tmp_path: Path) -> None:
    twice = [("lin", 1, 10.0), ("lin", 1, 11.0)]
    assert "curve 'lin' has 1 workers twice" in _fails(inputs(tmp_path, [JOB], curves=twice))
    zero = [("lin", 0, 10.0)]
    assert "workers 0 must be at least 1" in _fails(inputs(tmp_path, [JOB], curves=zero))
    negative = [("lin", 1, -3.0)]
    assert "samples_per_second '-3.0'" in _fails(inputs(tmp_path, [JOB], curves=negative))


def test_the_world_runs_on_the_measured_points_and_straight_lines_between() -> None:
    # not the sizer's USL: a dip at 5 and a fall at 8 stay what was measured
    curve = Curve("c", {2: 180.0, 4: 360.0, 5: 120.0, 8: 90.0})
    assert [curve.throughput(n) for n in (1, 2, 3, 4, 5, 8)] == [90.0, 180.0, 270.0, 360, 120, 90]
    assert curve.throughput(6) == pytest.approx(110.0)  # a third of the way from 5 to 8
    assert curve.throughput(12) == 90.0  # beyond the largest measured: no invented gain
    assert curve.throughput(0) == 0.0


PLACEMENTS = [
    ("c", "1", 32, 0.1),  # one worker: 320 samples/s, the curve's one-worker point
    ("c", "1", 64, 0.1),
    ("c", "4", 32, 0.2),  # four on one node: 640
    ("c", "41", 32, 0.5),  # four plus one: 320
    ("c", "14", 32, 0.4),  # the same placement, measured in the other order: 400
    ("c", "32", 32, 0.25),  # three plus two: 640
]


def test_a_placements_file_makes_speed_depend_on_workers_per_node(tmp_path: Path) -> None:
    curves = [("c", 1, 320.0), ("c", 4, 1000.0), ("c", 5, 900.0)]
    job = ("a", 0, 1, 4, 2, 1, "1Gi", 0, 1000, "c", 0)
    args = inputs(tmp_path, [job], curves=curves)
    place = write_csv(tmp_path / "placements.csv", PLACEMENT_COLUMNS, PLACEMENTS)
    files = dict(zip(args[::2], args[1::2], strict=True))
    workload = load_workload(
        Path(files["--workload"]), Path(files["--curves"]), Path(files["--cluster"]),
        placements=place,
    )  # fmt: skip
    c = workload.curves["c"]
    assert c.throughput(5) == 900.0  # the count alone: the curve (taken as packed, 4+1)
    assert c.throughput(5, (4, 1)) == 900.0
    # 3+2 ran at 640 where 4+1 (both orders averaged) ran at 360: 900 x 640 / 360
    assert c.throughput(5, (3, 2)) == pytest.approx(1600.0)
    assert c.throughput(4, (1, 1, 1, 1)) == 1000.0  # not measured: the curve


def test_bad_placements(tmp_path: Path) -> None:
    args = inputs(tmp_path, [JOB])
    bad = write_csv(tmp_path / "p.csv", PLACEMENT_COLUMNS, [("lin", "2x", 32, 0.1)])
    line = _fails([*args, "--placements", str(bad)])
    assert "p.csv line 2: placement '2x' must be workers per node" in line
    other = write_csv(tmp_path / "q.csv", PLACEMENT_COLUMNS, [("nope", "2", 32, 0.1)])
    line = _fails([*args, "--placements", str(other)])
    assert "curve 'nope' is not in the curves file" in line


def test_bad_cluster(tmp_path: Path) -> None:
    empty = [("n", 1, 0, "0", 0)]
    assert "node group 'n' has no cpu" in _fails(inputs(tmp_path, [JOB], nodes=empty))
    none = [("n", 0, 4, "8Gi", 0)]
    assert "count 0 must be at least 1" in _fails(inputs(tmp_path, [JOB], nodes=none))


def test_bad_background(tmp_path: Path) -> None:
    back = [(90, 5, 1, "1Gi", 0, 100), (30, 2, 1, "1Gi", 0, 100)]
    line = _fails(inputs(tmp_path, [JOB], background=back))
    assert "background.csv line 3: time_seconds 30 goes back in time (after 90)" in line
    negative = [(0, -1, 1, "1Gi", 0, 100)]
    assert "pods -1 must be at least 0" in _fails(inputs(tmp_path, [JOB], background=negative))


def test_a_missing_file(tmp_path: Path) -> None:
    args = inputs(tmp_path, [JOB])
    args[5] = str(tmp_path / "nowhere.csv")
    assert "nowhere.csv: cannot read" in _fails(args)


def test_bad_hpa_manifest(tmp_path: Path) -> None:
    args = inputs(tmp_path, [JOB])
    bad = tmp_path / "hpa.yaml"
    bad.write_text("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nspec: {}\n")
    line = _fails([*args, "--policy", "edl", "--hpa-edl-manifest", str(bad)])
    assert "hpa.yaml" in line
    throughput = Path(__file__).resolve().parents[4] / "manifests/examples/digits-trainer"
    line = _fails(
        [*args, "--policy", "edl", "--hpa-edl-manifest", str(throughput / "hpa-throughput.yaml")]
    )
    assert "the HPA must have exactly one External metric" in line


@pytest.mark.parametrize(
    "flags",
    [
        ["--policy", "fastest"],
        ["--sizing-interval", "0"],
        ["--max-load-desired", "1.5"],
        ["--start-delay", "-3"],
    ],
)
def test_bad_flags_exit_2(
    tmp_path: Path, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *inputs(tmp_path, [JOB]), *flags]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("edl-sim: error: --")


def test_good_files_still_run(tmp_path: Path) -> None:
    """The same helper's files, unbroken, run (so the failures above are the rows' fault)."""
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", *inputs(tmp_path, [JOB]), "--quiet", "--policy", "static"], out, err) == 0
    assert "JCT mean (s)" in out.getvalue()
