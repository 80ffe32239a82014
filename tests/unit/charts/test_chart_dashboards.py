"""charts/edl `dashboards`: the three Grafana dashboards as ConfigMaps Grafana's sidecar finds,
the same objects manifests/monitoring installs, from copies that cannot drift from dashboards/."""

from __future__ import annotations

import json

import pytest

from tests.support.dashboards import DASHBOARDS
from tests.support.helm import CHARTS, template
from tests.support.kustomize import render

COPIES = CHARTS / "edl" / "files" / "dashboards"


def test_the_charts_copies_are_the_dashboards_byte_for_byte() -> None:
    """A chart reads nothing outside its folder: edit dashboards/*.json, then copy them here
    (cp dashboards/*.json charts/edl/files/dashboards/)."""
    assert sorted(p.name for p in COPIES.glob("*.json")) == [p.name for p in DASHBOARDS]
    for original in DASHBOARDS:
        assert (COPIES / original.name).read_bytes() == original.read_bytes(), original.name


@pytest.mark.slow
def test_dashboards_are_off_by_default_and_on_are_the_kustomize_configmaps() -> None:
    assert not [d for d in template("edl") if d["metadata"]["name"].startswith("edl-dashboard")]
    docs = template("edl", sets=("dashboards.enabled=true",))
    ours = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"
            and d["metadata"]["name"].startswith("edl-dashboard-")}  # fmt: skip
    shipped = {d["metadata"]["name"]: d for d in render("dashboards")}
    assert sorted(ours) == sorted(shipped) and len(ours) == 3
    for name, configmap in ours.items():
        assert configmap["data"] == shipped[name]["data"]
        (text,) = configmap["data"].values()
        assert json.loads(text)["title"]  # a dashboard, whole
        assert configmap["metadata"]["namespace"] == "edl-system"
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert "annotations" not in configmap["metadata"]


@pytest.mark.slow
def test_the_sidecars_label_namespace_and_folder_are_values() -> None:
    docs = template("edl", sets=(
        "dashboards.enabled=true", "dashboards.namespace=grafana", "dashboards.label=dashboards",
        "dashboards.labelValue=edl", "dashboards.annotations.grafana_folder=EDL"))  # fmt: skip
    configmaps = [d for d in docs if d["metadata"]["name"].startswith("edl-dashboard-")]
    assert len(configmaps) == 3
    for configmap in configmaps:
        meta = configmap["metadata"]
        assert meta["namespace"] == "grafana"
        assert meta["labels"]["dashboards"] == "edl" and "grafana_dashboard" not in meta["labels"]
        assert meta["annotations"] == {"grafana_folder": "EDL"}
