"""The shipped Grafana dashboards load, are portable, pick a job by its job label, and query
only series that exist (the agent's, the adapter's, kube-state-metrics')."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.dashboards import (
    DASHBOARDS,
    MONITORING_DOC,
    ROOT,
    contract_series,
    exported_series,
    load,
    panels,
    queries,
    series_in,
)
from tests.support.kustomize import render


def test_there_are_dashboards() -> None:
    assert {p.name for p in DASHBOARDS} >= {
        "edl-training-job.json",
        "edl-gpu.json",
        "edl-adapter.json",
    }


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_portable_classic_json(path: Path) -> None:
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
            # `$1` is label_replace's group reference, which Grafana leaves alone.
            used = set(re.findall(r"\$([A-Za-z_]\w*)", target["expr"])) - {
                "__rate_interval",
                "__interval",
                "__range",
            }
            assert used <= variables, f"{panel['title']}: undefined variables {used - variables}"


def test_every_query_reads_only_exported_series() -> None:
    known = exported_series()
    # every table parsed: the agent's, the adapter's own, the sizing, kube-state-metrics'
    assert {
        "edl_trainer_samples_total",
        "edl_adapter_scrapes_total",
        "edl_adapter_sizing_desired_replicas",
        "kube_horizontalpodautoscaler_spec_max_replicas",
    } <= known
    for query in queries():
        used = series_in(query.expr)
        assert used, f"{query.dashboard} / {query.panel}: reads no known series"
        unknown = used - known
        assert not unknown, f"{query.dashboard} / {query.panel}: not exported: {sorted(unknown)}"


def test_the_adapter_dashboard_shows_every_adapter_series() -> None:
    adapter_queries = [q for q in queries() if q.dashboard == "edl-adapter.json"]
    shown = set().union(*(series_in(q.expr) for q in adapter_queries))
    adapter_series = {n for n in contract_series() if n.startswith("edl_adapter_")}
    missing = (
        adapter_series
        - shown
        - {
            # per-job figures are on the training-job dashboard
            "edl_adapter_sizing_marginal_speedup",
            "edl_adapter_sizing_min_replicas",
            "edl_adapter_sizing_max_replicas",
        }
    )
    assert not missing, sorted(missing)


@pytest.mark.parametrize("name", ["edl-training-job.json", "edl-gpu.json"])
def test_job_dashboards_pick_the_job_by_its_job_label(name: str) -> None:
    dashboard = load(ROOT / "dashboards" / name)
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables.index("namespace") < variables.index("job") < variables.index("pod")
    job = dashboard["templating"]["list"][variables.index("job")]
    assert job["query"]["query"].endswith(", job)")
    cluster_wide = {"variable namespace", "variable job", "Cluster: free share of allocatable"}
    for query in queries():
        if query.dashboard == name and query.panel not in cluster_wide:
            assert 'job=~"$job"' in query.expr, query.panel


def test_the_training_dashboard_has_hpa_sizing_and_rescale_annotations() -> None:
    dashboard = load(ROOT / "dashboards" / "edl-training-job.json")
    read = set().union(
        *(series_in(q.expr) for q in queries() if q.dashboard == "edl-training-job.json")
    )
    assert {
        "kube_horizontalpodautoscaler_status_desired_replicas",
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_horizontalpodautoscaler_spec_max_replicas",
        "edl_adapter_sizing_desired_replicas",
        "edl_adapter_sizing_limited_by",
        "edl_adapter_sizing_free",
    } <= read
    annotations = {a["name"]: a["expr"] for a in dashboard["annotations"]["list"]}
    assert "edl_trainer_generation" in annotations["World changes"]


def test_the_monitoring_doc_lists_every_panel() -> None:
    doc = " ".join(MONITORING_DOC.read_text().split())
    for path in DASHBOARDS:
        dashboard = load(path)
        assert f"`{path.name}`" in doc, path.name
        for panel in panels(dashboard):
            assert f"{panel['title']}" in doc, f"{path.name}: panel {panel['title']!r} undocumented"


@pytest.mark.slow
def test_the_kustomization_ships_every_dashboard_to_the_grafana_namespace() -> None:
    maps = [d for d in render("dashboards") if d["kind"] == "ConfigMap"]
    shipped = {name for d in maps for name in d["data"]}
    assert shipped == {p.name for p in DASHBOARDS}
    for d in maps:
        assert d["metadata"]["namespace"] == "monitoring"
        assert d["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_series_folding_catches_an_unknown_name() -> None:
    # The check above must be able to fail: a misspelt series is reported.
    assert series_in("rate(edl_trainer_sample_total[1m])") - exported_series() == {
        "edl_trainer_sample_total"
    }
    assert series_in("kube_horizontalpodautoscaler_max_replicas") - exported_series() == {
        "kube_horizontalpodautoscaler_max_replicas"
    }
    # recording rules' names are not series
    assert series_in("namespace_job:edl_trainer_samples:rate2m > 0") == set()
    assert series_in("edl_trainer_step_duration_seconds_bucket") == {
        "edl_trainer_step_duration_seconds"
    }


def test_the_training_dashboard_shows_progress_eta_and_loss_the_agent_exports() -> None:
    job = [q for q in queries() if q.dashboard == "edl-training-job.json"]
    by_panel = {q.panel: q.expr for q in job}
    assert "edl_job_progress_ratio" in series_in(by_panel["Progress"])
    assert "edl_job_eta_seconds" in series_in(by_panel["ETA"])
    assert series_in(by_panel["Loss"]) == {"edl_trainer_scalar"}
    assert 'name="loss"' in by_panel["Loss"]
    # the series are the agent's, in its table of the contract
    assert {"edl_job_progress_ratio", "edl_job_eta_seconds", "edl_trainer_scalar"} <= (
        contract_series()
    )
