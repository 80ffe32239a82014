"""The plain data-parallel examples run as their launchers run them, two ranks on 127.0.0.1.

`examples/train_digits_ddp.py` under torchrun (``python -m torch.distributed.run``) and
`examples/train_digits_paddle_dp.py` under ``paddle.distributed.launch``, with two DataLoader
workers each: what their elastic versions are compared with (the diff, bench/bench_ddp.py)
must be a script that trains. Every rank reports the world of two and a model that learned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.digits_job import ROOT

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

ARGS = ["--epochs", "3", "--batch-size", "32", "--workers", "2", "--seed", "3"]


def figures(output: str) -> list[dict[str, float]]:
    """Each rank's final line (``rank R: {...}``)."""
    return [
        json.loads(line.split(": ", 1)[1])
        for line in output.splitlines()
        if line.startswith("rank ") and line.rstrip().endswith("}")
    ]


def test_the_plain_ddp_script_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "-m", "examples.train_digits_ddp", *ARGS, "--result", str(tmp_path / "r.json")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = figures(done.stdout)
    assert len(ranks) == 2, done.stdout
    for rank in ranks:
        assert rank["world_size"] == 2 and rank["accuracy"] > 0.8
    assert json.loads((tmp_path / "r.json").read_text())["world_size"] == 2


def test_the_plain_paddle_script_trains_under_paddles_launcher(tmp_path: Path) -> None:
    pytest.importorskip("paddle")
    logs = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", str(logs),
         "--nproc_per_node", "2", str(ROOT / "examples" / "train_digits_paddle_dp.py"), *ARGS,
         "--result", str(tmp_path / "r.json")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "PADDLE_DISTRI_BACKEND": "gloo"},
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    worker_logs = "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob("workerlog.*")))
    assert done.returncode == 0, (done.stderr + worker_logs)[-3000:]
    ranks = figures(worker_logs)
    assert len(ranks) == 2, worker_logs[-3000:]
    for rank in ranks:
        assert rank["world_size"] == 2 and rank["accuracy"] > 0.8
