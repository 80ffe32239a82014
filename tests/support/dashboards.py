"""Reads the shipped Grafana dashboards, the metrics contract and the series other exporters
(kube-state-metrics, kube-apiserver) provide, for the dashboard and alert-rule tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
CONTRACT = ROOT / "docs" / "metrics-contract.md"
MONITORING_DOC = ROOT / "docs" / "monitoring.md"

# Grafana macros and variables, replaced by literals so the expression is plain PromQL.
_MACROS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
_VARIABLE = re.compile(r"\$(\w+)")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Series names EDL's queries read: its own, kube-state-metrics' and kube-apiserver's. A name
# right after `:` or a word character is part of a recording rule's name, not a series.
_SERIES = re.compile(r"(?<![\w:])(?:edl|kube|aggregator)_[a-z_]+")
_LABEL_VALUES = re.compile(r"label_values\((.+),\s*\w+\)")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str

    def as_promql(self, variable_value: str = ".*") -> str:
        expr = self.expr
        for macro, value in _MACROS.items():
            expr = expr.replace(macro, value)
        return _VARIABLE.sub(variable_value, expr)


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries() -> list[PanelQuery]:
    """Every PromQL expression of every dashboard: panel targets, annotations, and the series
    selector inside each `label_values(...)` variable."""
    found = []
    for path in DASHBOARDS:
        dashboard = load(path)
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                found.append(PanelQuery(path.name, panel["title"], target["expr"]))
        for annotation in dashboard.get("annotations", {}).get("list", []):
            if "expr" in annotation:
                found.append(
                    PanelQuery(path.name, f"annotation {annotation['name']}", annotation["expr"])
                )
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                match = _LABEL_VALUES.fullmatch(variable["query"]["query"])
                assert match, f"{path.name}: variable {variable['name']} is not label_values()"
                found.append(PanelQuery(path.name, f"variable {variable['name']}", match[1]))
    return found


def _first_column_names(doc: Path, prefix: str) -> set[str]:
    pattern = rf"^\| `({prefix}[a-z_]+)"
    return {m.group(1) for m in re.finditer(pattern, doc.read_text(), re.MULTILINE)}


def contract_series() -> set[str]:
    """Series names in the first column of the contract's tables (`name{labels}` → name)."""
    return _first_column_names(CONTRACT, "edl_")


def external_series() -> set[str]:
    """kube-state-metrics and kube-apiserver series listed in docs/monitoring.md's tables."""
    return _first_column_names(MONITORING_DOC, "(?:kube|aggregator)_")


def exported_series() -> set[str]:
    """Everything a dashboard or a rule may read."""
    return contract_series() | external_series()


def series_in(expr: str) -> set[str]:
    """Series an expression reads, with histogram suffixes folded into the family name."""
    names = set()
    for name in _SERIES.findall(expr):
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.endswith("_seconds" + suffix):
                name = name[: -len(suffix)]
        names.add(name)
    return names
