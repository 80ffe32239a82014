"""Every manifest and chart output is valid on each Kubernetes release docs/install.md claims.

Rendered as a user renders them (`kubectl kustomize`, `helm template --kube-version`) and
checked offline against that release's OpenAPI schema (tests/support/openapi_schemas.py: the
kind is served, no unknown field, types and required fields), as kube-apiserver's strict field
validation would check them on `kubectl apply`. A field newer than the oldest release claimed
is gated: on `.Capabilities.KubeVersion` in the charts, in an optional kustomize Component in
the manifests. Custom resources (prometheus-operator's, cert-manager's) are checked against
their CRDs in the e2e layer; here they are only counted.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHARTS, HelmFailed, examples, helm
from tests.support.kustomize import ROOT, render
from tests.support.openapi_schemas import SUPPORTED, ApiSchema

pytestmark = pytest.mark.slow

CUSTOM_GROUPS = frozenset({"monitoring.coreos.com", "cert-manager.io"})
KUSTOMIZATIONS = (
    "manifests/base",
    "manifests/overlays/production",
    "manifests/overlays/custom-only",
    "manifests/overlays/prometheus-adapter",
    "manifests/monitoring",
    "manifests/examples/digits-trainer",
    "manifests/examples/monitoring-release",
)
EXAMPLE = "manifests/examples/digits-trainer"
ALTERNATIVE_HPAS = ("hpa-throughput.yaml", "hpa-sizing-object.yaml")
# Optional components and the first minor each needs.
COMPONENTS = {"checkpoints": (1, 30), "hpa-tolerance": (1, 33)}


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


def problems(version: str, docs: list[dict[str, Any]]) -> list[str]:
    schema = ApiSchema.of(version)
    found = []
    for doc in docs:
        group = str(doc.get("apiVersion", "")).rpartition("/")[0]
        if group in CUSTOM_GROUPS:
            continue
        found += schema.errors(doc)
    return found


def with_components(tmp_path: Path, components: list[str]) -> list[dict[str, Any]]:
    """The example with these components, through a kustomization of its own."""
    base = os.path.relpath(ROOT / EXAMPLE, tmp_path)
    lines = [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        "resources:",
        f"  - {base}",
        "components:",
        *(f"  - {base}/{c}" for c in components),
    ]
    (tmp_path / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        ["kubectl", "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize("version", SUPPORTED)
@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_every_kustomization_is_valid_on_every_release_claimed(version: str, path: str) -> None:
    assert problems(version, render(path)) == []


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_alternative_hpas_are_valid_on_every_release_claimed(version: str) -> None:
    for name in ALTERNATIVE_HPAS:
        doc = yaml.safe_load((ROOT / EXAMPLE / name).read_text())
        assert problems(version, [doc]) == [], name


@pytest.mark.parametrize("version", SUPPORTED)
def test_each_component_is_valid_from_the_release_it_needs(version: str, tmp_path: Path) -> None:
    usable = [c for c, first in COMPONENTS.items() if minor(version) >= first]
    assert usable, "no component applies"
    assert problems(version, with_components(tmp_path, usable)) == []


def test_the_tolerance_component_is_what_an_older_release_refuses(tmp_path: Path) -> None:
    """The gate is needed: the oldest release claimed refuses the component's field."""
    found = problems(SUPPORTED[0], with_components(tmp_path, ["hpa-tolerance"]))
    assert found and all("unknown field 'tolerance'" in f for f in found)


@pytest.mark.parametrize("version", SUPPORTED)
@pytest.mark.parametrize("chart", ["edl", "edl-trainer"])
def test_every_chart_example_renders_valid_objects_on_every_release_claimed(
    chart: str, version: str
) -> None:
    for values in [None, *examples(chart)]:
        args = ["template", "r", str(CHARTS / chart), "--namespace", "ml",
                "--kube-version", version]  # fmt: skip
        if values is not None:
            args += ["-f", str(values)]
        docs = [d for d in yaml.safe_load_all(helm(*args)) if d]
        assert docs
        assert problems(version, docs) == [], values


def test_the_trainer_chart_gates_the_tolerance_on_the_release() -> None:
    def behaviors(version: str) -> list[dict[str, Any]]:
        args = ["template", "r", str(CHARTS / "edl-trainer"), "--kube-version", version]
        docs = [d for d in yaml.safe_load_all(helm(*args)) if d]
        return [d["spec"]["behavior"] for d in docs if d["kind"] == "HorizontalPodAutoscaler"]

    (old,) = behaviors(SUPPORTED[0])
    (new,) = behaviors(SUPPORTED[-1])
    assert "tolerance" not in old["scaleUp"] and "tolerance" not in old["scaleDown"]
    assert new["scaleUp"]["tolerance"] == "0" and new["scaleDown"]["tolerance"] == "0"


def test_the_charts_and_the_docs_claim_the_range_this_test_checks() -> None:
    oldest, newest = minor(SUPPORTED[0]), minor(SUPPORTED[-1])
    for chart in ("edl", "edl-trainer"):
        meta = yaml.safe_load((CHARTS / chart / "Chart.yaml").read_text())
        assert meta["kubeVersion"] == f">={oldest[0]}.{oldest[1]}.0-0", chart
    install = (ROOT / "docs" / "install.md").read_text()
    claimed = re.search(r"Kubernetes (\d+)\.(\d+) to (\d+)\.(\d+)", install)
    assert claimed is not None, "docs/install.md states no supported range"
    assert tuple(map(int, claimed.groups())) == (*oldest, *newest)
    below = f"{oldest[0]}.{oldest[1] - 1}.0"
    for chart in ("edl", "edl-trainer"):
        with pytest.raises(HelmFailed, match="kubeVersion"):
            helm("template", "r", str(CHARTS / chart), "--kube-version", below)


def test_the_trainer_chart_gang_is_valid_on_1_35_and_what_older_releases_do_not_serve() -> None:
    """`gang.enabled` is off in the examples above: its Workload kind and the pod's
    `workloadRef` exist in 1.35 only (alpha, behind feature gates; 1.36 replaced them), and the
    chart refuses to render it for another minor (tests/unit/charts/test_chart_gang.py). Where
    it renders, its objects are valid; the oldest release claimed serves neither."""
    newest, oldest = SUPPORTED[-1], SUPPORTED[0]
    assert minor(newest) == (1, 35), "the newest release claimed moved: revisit gang.enabled"
    args = ["template", "r", str(CHARTS / "edl-trainer"), "--namespace", "ml",
            "--kube-version", newest, "--set", "gang.enabled=true",
            "--set", "workers.min=2"]  # fmt: skip
    docs = [d for d in yaml.safe_load_all(helm(*args)) if d]
    assert {d["kind"] for d in docs} >= {"Workload", "Deployment"}
    assert problems(newest, docs) == []
    found = problems(oldest, docs)
    assert any("scheduling.k8s.io/v1alpha1 Workload is not served" in f for f in found), found
    assert any("unknown field 'workloadRef'" in f for f in found), found
