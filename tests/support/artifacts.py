"""Where a failing test keeps what it recorded, so the failure can be replayed offline.

`$EDL_TEST_ARTIFACTS` when set (CI points it at its upload folder), else `.test-artifacts/` in
the repository root (ignored by git). Temporary folders of a test session are gone by the time
someone reads the failure; this folder is not.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = "EDL_TEST_ARTIFACTS"


def artifacts_dir() -> Path:
    """The folder (created) that outlives the test session."""
    raw = os.environ.get(ENV, "").strip()
    folder = Path(raw) if raw else REPO_ROOT / ".test-artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def keep(path: Path, label: str) -> Path:
    """Copies `path` into the artifacts folder under a name that says what and when."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kept = artifacts_dir() / f"{label}-{stamp}-{os.getpid()}{path.suffix}"
    shutil.copyfile(path, kept)
    return kept
