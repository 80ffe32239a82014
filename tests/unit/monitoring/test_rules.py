"""The shipped recording rules and alerts: `promtool test rules` passes a firing and a quiet
case for every rule, every alert has a runbook, and every rule reads only exported series."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.dashboards import MONITORING_DOC, exported_series, series_in
from tests.support.kustomize import render
from tests.support.monitoring import alerts, promtool, records, rules, write_rule_file

CASES = Path(__file__).resolve().parent / "promtool"
CASE_FILES = sorted(CASES.glob("*.yaml"))


def run_promtool(tmp_path: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    write_rule_file(tmp_path / "edl-rules.yaml")
    for f in files:
        if f.parent != tmp_path:
            shutil.copy(f, tmp_path / f.name)
    return subprocess.run(
        [promtool(), "test", "rules", *(f.name for f in files)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_the_rules_pass_promtool_check(tmp_path: Path) -> None:
    path = write_rule_file(tmp_path / "edl-rules.yaml")
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


@pytest.mark.slow
def test_every_promtool_case_passes(tmp_path: Path) -> None:
    assert CASE_FILES
    result = run_promtool(tmp_path, CASE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(CASE_FILES), result.stdout


@pytest.mark.slow
def test_promtool_fails_a_wrong_expectation(tmp_path: Path) -> None:
    # The cases can fail: the stalled job's alert expected for the healthy job is reported.
    cases = yaml.safe_load((CASES / "alerts.yaml").read_text())
    first = cases["tests"][0]["alert_rule_test"][1]["exp_alerts"][0]
    first["exp_labels"]["job"] = "resnet"
    wrong = tmp_path / "wrong" / "alerts.yaml"
    wrong.parent.mkdir()
    wrong.write_text(yaml.safe_dump(cases))
    result = run_promtool(wrong.parent, [wrong])
    assert result.returncode != 0
    assert "EDLTrainingStalled" in result.stdout + result.stderr


def _cases() -> list[dict[str, Any]]:
    return [t for f in CASE_FILES for t in yaml.safe_load(f.read_text())["tests"]]


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in _cases():
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert set(alerts()) == fired, "alerts without a firing case"
    assert set(alerts()) == quiet, "alerts without a quiet case"


def test_every_recording_rule_has_a_value_and_an_edge_case() -> None:
    valued: set[str] = set()
    edge: set[str] = set()
    for case in _cases():
        for check in case.get("promql_expr_test", []):
            name = re.match(r"[\w:]+", check["expr"])
            assert name, check["expr"]
            values = [s["value"] for s in check["exp_samples"]]
            if any(v != 0 for v in values):
                valued.add(name[0])
            if not values or 0 in values:
                edge.add(name[0])
    assert set(records()) == valued, "recording rules without a case that records a value"
    assert set(records()) == edge, "recording rules without an empty or zero case"


@pytest.mark.parametrize("name", sorted(alerts()))
def test_every_alert_has_severity_text_and_a_runbook(name: str) -> None:
    alert = alerts()[name]
    assert alert["labels"]["severity"] in ("info", "warning", "critical")
    annotations = alert["annotations"]
    assert annotations["summary"] and annotations["description"]
    anchor = annotations["runbook_url"].rsplit("#", 1)[1]
    assert anchor == name.lower()
    assert f"\n### {name}\n" in MONITORING_DOC.read_text(), f"no runbook section for {name}"


def test_every_rule_reads_only_exported_series() -> None:
    known = exported_series()
    recorded = set(records())
    for rule in rules():
        expr = rule["expr"]
        unknown = series_in(expr) - known
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: {sorted(unknown)}"
        for used in re.findall(r"\b[a-z_]+:[a-z_:0-9]+", expr):
            assert used in recorded, f"{rule.get('alert') or rule.get('record')}: {used}"


@pytest.mark.slow
def test_the_apiservice_alert_watches_exactly_the_base_apiservices() -> None:
    names = {d["metadata"]["name"] for d in render("manifests/base") if d["kind"] == "APIService"}
    expr = alerts()["EDLMetricsAPIServiceUnavailable"]["expr"]
    (pattern,) = re.findall(r'name=~"([^"]+)"', expr)
    regex = re.compile(pattern.replace("\\\\", "\\"))  # PromQL string escapes -> RE2
    assert all(regex.fullmatch(n) for n in names), (pattern, names)
    assert not regex.fullmatch("v1beta1.metrics.k8s.io")  # metrics-server's
    assert len(pattern.split("|")) == len(names)
