"""Packages of this repository as they are at a git ref (benches time a ref beside the tree)."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def export_packages(ref: str, into: Path, *packages: str) -> None:
    """``packages`` (top-level folders) at ``ref``, extracted under ``into`` (put it first on
    PYTHONPATH to import them instead of the tree's)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref, *packages],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout  # fmt: skip
    tar = into / "ref.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as f:
        f.extractall(into, filter="data")
