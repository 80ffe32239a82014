"""The adapter exports every edl_adapter_* series the metrics contract lists (sizing aside:
the sizer exports those), under the listed type."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, generate_latest

from metrics_adapter.selfmetrics import AdapterMetrics
from tests.support.dashboards import CONTRACT


def listed_adapter_series() -> dict[str, str]:
    """`edl_adapter_*` rows of the contract (sizing excluded): name -> type."""
    rows = re.findall(
        r"^\| `(edl_adapter_[a-z_]+)[^`]*` \| (\w+) \|", CONTRACT.read_text(), re.MULTILINE
    )
    return {name: kind for name, kind in rows if not name.startswith("edl_adapter_sizing_")}


def test_the_contract_lists_the_adapter_series() -> None:
    listed = listed_adapter_series()
    assert "edl_adapter_scrapes_total" in listed
    assert len(listed) >= 13


def test_a_fresh_adapter_registry_exports_every_listed_series() -> None:
    registry = CollectorRegistry()
    AdapterMetrics(registry)
    text = generate_latest(registry).decode()
    exported = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    listed = listed_adapter_series()
    assert {n: exported.get(n) for n in listed} == listed
    # and nothing edl_adapter_* that the contract leaves out (prometheus_client's `_created`
    # companions of counters and histograms aside)
    own = {n for n in exported if n.startswith("edl_adapter_") and not n.endswith("_created")}
    assert own == set(listed)
