"""`make images` with no builder to be had: one line that says what to install."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.kustomize import ROOT


@pytest.mark.slow
def test_no_builder_and_no_apt_get_is_one_line_naming_what_to_install(tmp_path: Path) -> None:
    empty_path = tmp_path / "bin"  # no podman, buildah, docker or apt-get on PATH
    empty_path.mkdir()
    done = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts/install-image-tools.sh")],
        env={"PATH": str(empty_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "install podman" in line and "docker" in line, line


@pytest.mark.slow
def test_a_builder_named_but_not_usable_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts/install-image-tools.sh")],
        env={"PATH": str(tmp_path), "EDL_IMAGE_BUILDER": "docker"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "EDL_IMAGE_BUILDER=docker" in line and "daemon" in line, line


def deps(*extras: str, paddle: str = "", skip: str = "") -> list[str]:
    done = subprocess.run(
        ["python3", str(ROOT / "images/pyproject-deps.py"), str(ROOT / "pyproject.toml"), *extras],
        env={"EDL_PADDLE_REQUIREMENT": paddle, "EDL_SKIP_REQUIREMENTS": skip, "PATH": "/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.mark.slow
def test_the_gpu_build_argument_swaps_only_the_paddle_wheel() -> None:
    cpu, gpu = deps("paddle", "gpu"), deps("paddle", "gpu", paddle="paddlepaddle-gpu==3.3.1")
    assert "paddlepaddle==3.3.1" in cpu and "paddlepaddle-gpu==3.3.1" in gpu
    assert [r for r in cpu if not r.startswith("paddle")] == [
        r for r in gpu if not r.startswith("paddle")
    ]
    assert not any(r.startswith("paddle") for r in deps())  # the adapter gets no Paddle


@pytest.mark.slow
def test_every_image_requirement_is_pinned() -> None:
    pins = {
        line.split("==")[0].lower()
        for line in (ROOT / "images/constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    for requirement in deps("paddle", "gpu") + deps("torch", skip="torch"):
        name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        assert name.lower().replace("_", "-") in pins, requirement


@pytest.mark.slow
def test_the_torch_image_installs_the_torch_extra_but_torch_itself() -> None:
    """torch comes from the machine's install (images/torch-site.py), scikit-learn from pip."""
    torch = deps("torch", skip="torch")
    assert not any(r.startswith("torch") for r in torch)
    assert any(r.startswith("scikit-learn") for r in torch)
    assert set(deps()) < set(torch)


@pytest.mark.slow
def test_the_torch_tree_without_a_torch_install_is_one_line(tmp_path: Path) -> None:
    script, missing = str(ROOT / "images/torch-site.py"), tmp_path / "none"
    done = subprocess.run(
        ["python3", script, str(missing), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert (
        done.stderr == f"torch-site: no torch in {missing} (scripts/install-torch.sh installs it)\n"
    )
    assert not (tmp_path / "out").exists()


def test_the_images_keep_only_the_console_scripts_whose_package_they_install() -> None:
    """pip writes every script of pyproject.toml into the app stage; the one of a package the
    stage does not copy (edl_sim: edl-hpa, edl-sim) would fail with ModuleNotFoundError, so the
    stage removes exactly those."""
    containerfile = (ROOT / "images/Containerfile").read_text()
    stage = containerfile.split("FROM deps AS app", 1)[1].split("\nFROM ", 1)[0]
    copied = set(re.findall(r"^COPY (\w+) /tmp/edl/src/\1$", stage, re.MULTILINE))
    assert {"agent", "metrics_adapter", "edl_common", "edl_sizing"} <= copied
    assert "edl_sim" not in copied  # docs/architecture.md: not in the adapter image
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    without_package = {
        name for name, target in scripts.items() if re.split(r"[.:]", target)[0] not in copied
    }
    assert without_package == {"edl-hpa", "edl-sim"}
    (removal,) = re.findall(r"&& rm (/opt/edl-app/bin/\S+(?: /opt/edl-app/bin/\S+)*)", stage)
    assert {Path(p).name for p in removal.split()} == without_package
