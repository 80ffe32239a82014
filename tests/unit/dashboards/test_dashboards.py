"""The shipped Grafana dashboards load, are portable, and query only series the agent exports."""

from __future__ import annotations

import re

import pytest

from tests.dashboards_support import (
    DASHBOARDS,
    contract_series,
    load,
    panels,
    queries,
    series_in,
)


def test_there_are_dashboards() -> None:
    assert len(DASHBOARDS) >= 2


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_portable_classic_json(path) -> None:
    dashboard = load(path)
    assert dashboard["id"] is None
    assert 8 <= len(dashboard["uid"]) <= 40
    assert 36 <= dashboard["schemaVersion"] <= 42
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {
                "__rate_interval",
                "__interval",
                "__range",
            }
            assert used <= variables, f"{panel['title']}: undefined variables {used - variables}"


def test_every_query_reads_only_contract_series() -> None:
    known = contract_series()
    assert "edl_trainer_samples_total" in known  # the contract parsed at all
    for query in queries():
        used = series_in(query.expr)
        assert used, f"{query.dashboard} / {query.panel}: reads no EDL series"
        unknown = used - known
        assert not unknown, f"{query.dashboard} / {query.panel}: not exported: {sorted(unknown)}"


def test_series_folding_catches_an_unknown_name() -> None:
    # The check above must be able to fail: a misspelt series is reported.
    assert series_in("rate(edl_trainer_sample_total[1m])") - contract_series() == {
        "edl_trainer_sample_total"
    }
    assert series_in("edl_trainer_step_duration_seconds_bucket") == {
        "edl_trainer_step_duration_seconds"
    }
