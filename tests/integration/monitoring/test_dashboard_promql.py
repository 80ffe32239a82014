"""Every dashboard query parses with Prometheus' own PromQL parser (`promtool check rules`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.dashboards import queries

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed"
)


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    found = queries()
    assert found
    rules = [
        {"record": f"edl:dashboard_query:{i}", "expr": q.as_promql()} for i, q in enumerate(found)
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(found)} rules found" in result.stdout


@needs_promtool
def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    broken = {"record": "edl:broken", "expr": "sum(rate(edl_trainer_samples_total[1m])"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [broken]}]}))
    result = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
