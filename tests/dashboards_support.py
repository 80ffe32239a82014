"""Reads the shipped Grafana dashboards and the metrics contract, for the dashboard tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
CONTRACT = ROOT / "docs" / "metrics-contract.md"

# Grafana macros and variables, replaced by literals so the expression is plain PromQL.
_MACROS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
_VARIABLE = re.compile(r"\$(\w+)")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


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
    found = []
    for path in DASHBOARDS:
        dashboard = load(path)
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                found.append(PanelQuery(path.name, panel["title"], target["expr"]))
    return found


def contract_series() -> set[str]:
    """Series names in the first column of the contract's tables (`name{labels}` → name)."""
    names = set()
    for match in re.finditer(r"^\| `(edl_[a-z_]+)", CONTRACT.read_text(), re.MULTILINE):
        names.add(match.group(1))
    return names


def series_in(expr: str) -> set[str]:
    """EDL series an expression reads, with histogram suffixes folded into the family name."""
    names = set()
    for name in re.findall(r"\bedl_[a-z_]+", expr):
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.endswith("_seconds" + suffix):
                name = name[: -len(suffix)]
        names.add(name)
    return names
