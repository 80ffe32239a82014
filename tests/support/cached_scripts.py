"""The scripts/ that build or fetch a pinned tool or schema into ~/.cache/edl and print where
it is as their last stdout line (build-helm.sh, fetch-*-crds.sh), run from the tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ScriptFailed(RuntimeError):
    """The script exited non-zero; the message holds the tail of its stderr."""


def cached_path(script: str, timeout_s: float = 600) -> Path:
    """Runs ``scripts/<script>`` (instant when cached); the path it printed last.

    Raises:
        ScriptFailed: a non-zero exit.
    """
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / script)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise ScriptFailed(f"scripts/{script} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])
