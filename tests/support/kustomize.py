"""Renders the repository's kustomizations with `kubectl kustomize`, for the manifest tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


def render(path: str) -> list[dict[str, Any]]:
    """The documents `kubectl kustomize ROOT/path` prints (skips when kubectl is absent)."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]
