"""What the e2e fixtures hand to tests: the namespace, kubectl, the run folder, log sources.

Kept out of conftest.py so tests (and `make demo-cluster`) import plain modules, never conftest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kubernetes import client

from tests.e2e.harness.podrunner import PodRunner


class HasLogs(Protocol):
    """A component whose log tails are attached to a failed test's report."""

    def log_tails(self, lines: int = ...) -> str: ...


LOG_SOURCES: list[HasLogs] = []
"""What the running session's fixtures started (conftest attaches their logs on failure)."""


_KEEP_RUNS = 5
_PRUNE_AFTER_S = 3600.0


def work_root() -> Path:
    """A fresh run folder (logs, PKI, kubeconfig); runs beyond the newest few, older than an
    hour, are removed. `EDL_E2E_WORK_DIR` chooses the parent (default: the temp dir)."""
    parent = Path(os.environ.get("EDL_E2E_WORK_DIR") or tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    old = sorted(parent.glob("edl-e2e-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for run in old[_KEEP_RUNS:]:
        if time.time() - run.stat().st_mtime > _PRUNE_AFTER_S:
            shutil.rmtree(run, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix="edl-e2e-", dir=parent))


@dataclass
class E2ENamespace:
    """A fresh namespace whose pods the runner executes locally."""

    name: str
    runner: PodRunner
    load_dir: Path
    api: client.ApiClient


@dataclass
class Kubectl:
    """The real kubectl, pointed at the loopback control plane."""

    binary: str
    kubeconfig: Path

    def __call__(self, *args: str, timeout_s: float = 30.0) -> str:
        done = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed rc={done.returncode}: {done.stderr.strip()}"
            )
        return done.stdout
