"""A checkpoint script run as a new pod runs it, for the object-storage tests.

Every pod of the job is lost: what restores is another process in another working directory
with its own HOME (no ``~/.aws``, no ``~/.ssh``), nothing inherited but ``PATH``, the project
on ``PYTHONPATH``, the job's name, its ``EDL_CHECKPOINT_URL`` and the store's credentials.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RESTORER = """
import json, os
from agent.checkpoints.catalogue import Checkpoints
from agent.checkpoints.settings import CheckpointSettings
store = CheckpointSettings.from_env(os.environ).store(os.environ["EDL_JOB"])
found = Checkpoints(store).newest_usable(lambda m, blob: blob.decode())
print(json.dumps(None if found is None else [found[0].step, found[1]]))
"""
"""Prints the newest usable checkpoint of job ``EDL_JOB`` as ``[step, payload]`` (or null)."""


def run_as_new_pod(
    script: str, url: str, cwd: Path, credentials: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """`script` (Python source) in a new process with nothing but a pod's environment."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT),
            "HOME": str(cwd),
            "EDL_JOB": "digits",
            "EDL_CHECKPOINT_URL": url,
            **credentials,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Terminates a test server's process, killed if it lingers."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)
