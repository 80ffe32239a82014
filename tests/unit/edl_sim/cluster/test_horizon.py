"""`edl-sim run` never compares policies over different jobs.

By default a run goes on until every job has finished; a job left far past what running every
job alone would take is an error naming it. With `--max-time` the jobs left are named in the
table and the JSON, and a ratio between policies that finished different jobs is refused.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from edl_sim.cluster.cli import main
from tests.unit.edl_sim.cluster.helpers import inputs

pytestmark = pytest.mark.unit

# name, submit, min, max, requested, cpu, memory, gpu, work, curve, priority
QUICK = ("quick", 0, 1, 4, 1, 1, "1Gi", 0, 2_000, "lin", 0)
LONG = ("long", 0, 1, 4, 2, 1, "1Gi", 0, 400_000, "lin", 0)
PAIR = ("pair", 10, 2, 2, 2, 1, "1Gi", 0, 1_000, "lin", 0)
# time, pods, cpu, memory, gpu, priority: a service holding 3 of the node's 4 CPUs for ever
SERVICE = [(0, 3, 1, "1Gi", 0, 1000)]


def run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", *args, "--quiet"], out, err)
    return code, out.getvalue(), err.getvalue()


def test_by_default_every_job_finishes_however_long_it_takes(tmp_path: Path) -> None:
    """The long job needs 400,000 samples at 20/s on 2 workers (static): 5.6 h simulated, and
    the edl policy grows it; both finish it, and the ratios are given."""
    code, out, err = run([*inputs(tmp_path, [QUICK, LONG]), "--json", "--policy", "static,edl"])
    assert code == 0, err
    doc = json.loads(out)
    for name in ("static", "edl"):
        assert doc["policies"][name]["jobs_finished"] == 2
        assert doc["policies"][name]["jobs_unfinished"] == []
    assert doc["ratios_to_static"]["edl"]["jct_mean_s"] is not None
    assert "ratios_refused_static" not in doc


def test_a_job_that_never_gets_room_is_an_error_naming_it(tmp_path: Path) -> None:
    """`pair` needs 2 workers together; a higher-priority service holds 3 of 4 CPUs first."""
    args = [*inputs(tmp_path, [PAIR], background=SERVICE), "--policy", "static"]
    code, out, err = run(args)
    assert code != 0 and out == ""
    (line,) = err.strip().splitlines()
    assert "static left 1 of 1 jobs unfinished" in line and "pair (submitted at 10 s)" in line
    assert "--max-time" in line


def test_a_horizon_names_the_jobs_left_and_refuses_ratios_over_different_jobs(
    tmp_path: Path,
) -> None:
    """At 20 samples/s static needs 20,000 s for the long job; edl grows it to 4 workers and
    finishes it within 15,000 s."""
    args = [*inputs(tmp_path, [QUICK, LONG]), "--policy", "static,edl", "--max-time", "15000s"]
    code, out, err = run([*args, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    static, edl = doc["policies"]["static"], doc["policies"]["edl"]
    assert static["jobs_unfinished"] == ["long"] and static["jobs_finished"] == 1
    assert edl["jobs_unfinished"] == [] and edl["jobs_finished"] == 2
    assert all(v is None for v in doc["ratios_to_static"]["edl"].values())
    assert "not the same jobs" in doc["ratios_refused_static"]["edl"]
    code, table, err = run(args)
    assert code == 0, err
    assert "static: unfinished when the run stopped: long" in table
    assert "edl: no ratio to static" in table
    assert "(x0" not in table and "(x1" not in table
