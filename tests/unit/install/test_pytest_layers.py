"""`make test`'s layer runner (scripts/pytest-layer.sh): what CI's exit status and log rest on.

The script runs in a copy of its folder layout with a stand-in `.venv/bin/python` that prints
its arguments and exits with a status chosen per layer, so each contract is checked without
running pytest: every lane runs to its end, a failure anywhere fails the run, a layer that
collects nothing is a failure, and each layer's output reaches the log.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "pytest-layer.sh"

FAKE_PYTEST = """#!/bin/bash
echo "ran: $*"
folder=$3
marks=$5
case "$folder:$marks" in
  {cases}
esac
exit 0
"""


def _tree(tmp_path: Path, cases: str) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / SCRIPT.name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTEST.format(cases=cases))
    python.chmod(0o755)
    return tmp_path


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / "scripts" / SCRIPT.name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_lanes_run_every_layer_and_print_each_lanes_output(tmp_path: Path) -> None:
    root = _tree(tmp_path, "")
    done = _run(root, "--lanes", "integration", "unit e2e e2e-kubelet")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "ran: -m pytest tests/integration -m integration" in out
    assert "ran: -m pytest tests/unit -m unit" in out
    assert "ran: -m pytest tests/e2e -m e2e and not kueue and not kubelet" in out
    assert "ran: -m pytest tests/e2e -m e2e and kubelet" in out
    # the second lane's layers, in their order, after the lane's header
    lane = out[out.index("=== lane 2 (unit e2e e2e-kubelet) ended with status 0") :]
    assert lane.index("layer: unit") < lane.index("layer: e2e\n") < lane.index("layer: e2e-kubelet")


def test_a_failure_in_a_lane_beside_fails_the_run_and_the_other_layers_still_run(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path, 'tests/unit:unit) echo "1 failed"; exit 1 ;;')
    done = _run(root, "--lanes", "integration", "unit e2e")
    assert done.returncode == 1
    assert "ran: -m pytest tests/e2e -m e2e and not kueue and not kubelet" in done.stdout
    assert "=== lane 2 (unit e2e) ended with status 1" in done.stdout
    assert "1 failed" in done.stdout


def test_a_layer_that_collects_nothing_is_a_failure(tmp_path: Path) -> None:
    root = _tree(tmp_path, "tests/e2e:e2e\\ and\\ kubelet) exit 5 ;;")
    done = _run(root, "--lanes", "integration", "e2e e2e-kubelet")
    assert done.returncode == 1
    assert "layer e2e-kubelet: no tests collected; that is a failure" in done.stdout


def test_without_lanes_layers_run_in_order_and_the_first_failure_is_the_status(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path, "tests/integration:integration) exit 2 ;; tests/e2e:*) exit 1 ;;")
    done = _run(root, "unit", "integration", "e2e")
    assert done.returncode == 2
    out = done.stdout
    assert out.index("layer: unit") < out.index("layer: integration") < out.index("layer: e2e")
