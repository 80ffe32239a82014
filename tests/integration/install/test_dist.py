"""`make dist` as a release manager runs it: every artifact, checksums that verify, SBOMs, images.

scripts/build-dist.sh (what `make dist` runs) into an empty folder: the wheel and sdist, both
charts, a CycloneDX SBOM of the base install and one of ``[adapter]`` (cyclonedx-py reading an
environment the wheel was installed into), IMAGES (this version's images the local store holds,
with their ids) and SHA256SUMS over all of them. The SBOMs are read as a scanner reads them:
components by name, version and purl; the base install's names every base dependency at a
version its requirement allows and lists none of the adapter's server libraries.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k not in ("IMAGES", "SBOM_EXTRAS", "IMAGE_REPO")}
    done = subprocess.run(
        ["bash", "scripts/build-dist.sh", sys.executable, str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def components(sbom: Path) -> dict[str, dict[str, Any]]:
    """The SBOM's components by canonical name."""
    bom = json.loads(sbom.read_text())
    assert bom["bomFormat"] == "CycloneDX"
    assert bom["metadata"]["component"]["name"] == "edl-k8s"
    assert bom["metadata"]["component"]["version"] == VERSION
    return {canonicalize_name(c["name"]): c for c in bom["components"]}


def test_every_artifact_is_there_and_the_checksums_verify(dist: Path) -> None:
    artifacts = {
        f"edl_k8s-{VERSION}-py3-none-any.whl",
        f"edl_k8s-{VERSION}.tar.gz",
        f"edl-{VERSION}.tgz",
        f"edl-trainer-{VERSION}.tgz",
        f"edl_k8s-{VERSION}.cdx.json",
        f"edl_k8s-{VERSION}-adapter.cdx.json",
        "IMAGES",
    }
    assert {p.name for p in dist.iterdir()} == artifacts | {"SHA256SUMS"}
    listed = {line.split()[1] for line in (dist / "SHA256SUMS").read_text().splitlines()}
    assert listed == artifacts
    check = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"],
        cwd=dist,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK\n") == len(artifacts)


def test_the_base_sbom_names_the_dependencies_with_their_versions_and_no_adapter_library(
    dist: Path,
) -> None:
    found = components(dist / f"edl_k8s-{VERSION}.cdx.json")
    for line in PROJECT["dependencies"]:
        wanted = Requirement(line)
        name = canonicalize_name(wanted.name)
        assert name in found, f"{name} is not in the base SBOM"
        version = found[name]["version"]
        assert wanted.specifier.contains(version), f"{name} {version} is not {wanted.specifier}"
        assert found[name]["purl"] == f"pkg:pypi/{name}@{version}"
    assert {"kubernetes", "prometheus-client"} <= set(found)
    adapter = {
        canonicalize_name(Requirement(r).name) for r in PROJECT["optional-dependencies"]["adapter"]
    }
    assert not adapter & set(found), "the base install would carry the adapter's libraries"
    assert "pip" not in found  # the wheel's closure, not the tools that installed it


def test_the_adapter_sbom_adds_the_adapters_libraries(dist: Path) -> None:
    base = components(dist / f"edl_k8s-{VERSION}.cdx.json")
    found = components(dist / f"edl_k8s-{VERSION}-adapter.cdx.json")
    for line in PROJECT["optional-dependencies"]["adapter"]:
        wanted = Requirement(line)
        name = canonicalize_name(wanted.name)
        assert name in found and wanted.specifier.contains(found[name]["version"]), name
    assert set(base) < set(found)


def test_images_names_this_versions_images_the_local_store_holds(dist: Path) -> None:
    lines = (dist / "IMAGES").read_text().splitlines()
    assert lines[0].startswith(f"# The images of edl-k8s {VERSION}")
    listed = {name: (ref, image_id) for name, ref, image_id in (line.split() for line in lines[1:])}
    podman = shutil.which("podman") or shutil.which("docker")
    held = {}
    for name, repo in (("adapter", "edl"), ("trainer", "edl-trainer"),
                       ("trainer-torch", "edl-trainer-torch")):  # fmt: skip
        ref = f"localhost/{repo}:{VERSION}"
        if podman is None:
            continue
        inspect = subprocess.run(
            [podman, "image", "inspect", "--format", "{{.Id}}", ref],
            capture_output=True,
            text=True,
            check=False,
        )
        if inspect.returncode == 0:
            held[name] = (ref, "sha256:" + inspect.stdout.strip().removeprefix("sha256:"))
    assert listed == held


def chart_images(helm: str, chart: Path) -> list[str]:
    """The images a chart's defaults run, as `helm template` renders them."""
    shown = subprocess.run(
        [helm, "template", "x", str(chart)], capture_output=True, text=True, check=True
    ).stdout
    return sorted({line.split("image:", 1)[1].strip().strip('"') for line in shown.splitlines()
                   if line.strip().startswith("image:")})  # fmt: skip


def test_the_packaged_charts_default_to_the_images_of_the_release(
    dist: Path, tmp_path: Path
) -> None:
    """One setting names the images: IMAGE_REPO (here the default, localhost) for `make images`,
    IMAGES and the packaged charts' defaults alike; another registry, packaged, is pulled as is."""
    helm = subprocess.run(
        ["bash", "scripts/build-helm.sh"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert chart_images(helm, dist / f"edl-{VERSION}.tgz") == [f"localhost/edl:{VERSION}"]
    assert chart_images(helm, dist / f"edl-trainer-{VERSION}.tgz") == [
        f"localhost/edl-trainer:{VERSION}"
    ]
    repo = "registry.example.com/ml"
    subprocess.run(
        ["bash", "scripts/package-charts.sh", helm, str(tmp_path), repo], cwd=ROOT, check=True
    )
    assert chart_images(helm, tmp_path / f"edl-{VERSION}.tgz") == [f"{repo}/edl:{VERSION}"]
    assert chart_images(helm, tmp_path / f"edl-trainer-{VERSION}.tgz") == [
        f"{repo}/edl-trainer:{VERSION}"
    ]
    values = (ROOT / "charts" / "edl" / "values.yaml").read_text()
    assert "repository: localhost/edl " in values  # the tree is left as it was
