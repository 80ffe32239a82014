"""`edl-agent --membership kubernetes` started outside a cluster: one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_kubernetes_membership_without_a_cluster_is_one_error_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "EDL_JOBB": "typo"}
    done = subprocess.run(
        [f"{sys.prefix}/bin/edl-agent", "run", "--elastic", "--job", "d",
         "--membership", "kubernetes", "--", "true"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith("edl-agent: error: --membership kubernetes: not in a pod")
    assert lines[-1].endswith("run it in a pod, or set KUBECONFIG")
    assert "unknown environment variable EDL_JOBB is ignored (did you mean EDL_JOB?)" in lines[0]
