"""`make images` with no builder to be had: one line that says what to install."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.kustomize_support import ROOT


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
