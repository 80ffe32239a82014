"""Reads the shipped PrometheusRule (manifests/monitoring) for the rule tests and Prometheus."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_RULE = ROOT / "manifests" / "monitoring" / "prometheusrule.yaml"
PROMTOOL = shutil.which("promtool")


def rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's `spec.groups`: exactly a Prometheus rule file's `groups`."""
    groups: list[dict[str, Any]] = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rules() if "alert" in r}


def records() -> dict[str, dict[str, Any]]:
    return {r["record"]: r for r in rules() if "record" in r}


def write_rule_file(path: Path, for_overrides: dict[str, str] | None = None) -> Path:
    """Writes the groups as a Prometheus rule file; `for_overrides` shortens alerts' `for`."""
    groups = rule_groups()
    for group in groups:
        for rule in group["rules"]:
            if "alert" in rule and rule["alert"] in (for_overrides or {}):
                rule["for"] = (for_overrides or {})[rule["alert"]]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def promtool() -> str:
    """The promtool binary (skips when absent: `make system-deps` installs it)."""
    if PROMTOOL is None:
        pytest.skip("promtool is missing (Debian package prometheus: make system-deps)")
    return PROMTOOL
