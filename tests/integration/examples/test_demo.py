"""`make demo` (short mode) tells its story and proves its ending, and Ctrl-C leaves nothing.

What a user checks: the world sizes the job went through (1 -> 3 -> 1 -> 3), every sample of
every epoch trained exactly once (the ledger, replayed here too), a valid PNG, and the final
accuracy beside the one-process reference run. Nothing here depends on how fast anything
starts: the story advances on what the job has done, and every wait is a bounded poll.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from agent.trainer.ledger import verify
from examples.demo.report import turning_points
from examples.demo.run import REPO_ROOT
from tests.support.waiting import wait_for

DEMO = [sys.executable, "-m", "examples.demo", "--short", "--plain"]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_grows_shrinks_grows_and_loses_nothing(tmp_path: Path) -> None:
    out_dir = tmp_path / "demo"
    done = subprocess.run(
        [*DEMO, "--out", str(out_dir)],
        cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "Traceback" not in out, out[-6000:]

    sizes = re.search(r"^  world sizes: ([0-9 >-]+?)(?: \(|$)", out, re.MULTILINE)
    assert sizes, out[-4000:]
    # grew to 3, shrank to 1, grew to 3 (a growth may come as 1 -> 2 -> 3 on a loaded box)
    assert turning_points([int(n) for n in sizes.group(1).split(" -> ")]) == [1, 3, 1, 3], out
    assert re.search(r"rescale: generation \d+, 3 -> 1 workers", out), out[-4000:]
    assert "a higher-priority service arrives" in out
    assert "shrank to 1: made room for" in out

    reference = json.loads((out_dir / "work" / "reference.json").read_text())
    final = json.loads((out_dir / "work" / "result.json").read_text())
    report = verify(out_dir / "work" / "ledger")
    assert report.problems(reference["train_samples"], reference["epochs"]) == []
    assert report.steps == final["global_step"]
    assert f"each of the {reference['train_samples']} samples of each of the" in out
    assert "0 missing, 0 repeated" in out

    m = re.search(r"accuracy: ([0-9.]+) elastic, ([0-9.]+) one process, same seed \(match\)", out)
    assert m, out[-3000:]
    assert float(m.group(1)) == pytest.approx(final["accuracy"], abs=1e-4)
    assert float(m.group(2)) == pytest.approx(reference["accuracy"], abs=1e-4)
    assert abs(final["accuracy"] - reference["accuracy"]) <= 0.01

    png = out_dir / "report.png"
    assert f"report: {png}" in out
    width, height = _png_size(png)
    assert width > 400 and height > 400
    import matplotlib.pyplot as plt

    assert plt.imread(png).shape[:2] == (height, width)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_stops_every_process_of_the_demo(tmp_path: Path) -> None:
    out_dir = tmp_path / "demo"
    world = out_dir / "work" / "store" / "digits" / "world.json"
    proc = subprocess.Popen(
        [*DEMO, "--out", str(out_dir)], cwd=REPO_ROOT, env=ENV,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: world.exists() and json.loads(world.read_text() or "{}").get("members"),
            timeout_s=240,
            what="the demo's job to form a world",
            give_up=lambda: proc.poll() is not None,
        )
        assert proc.poll() is None
        descendants = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in descendants)
        assert "metrics_adapter" in names and "agent run" in names and "train_digits" in names

        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, output[-3000:]
    assert "stopped: every process of the demo has ended" in output
    alive = [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    strays = []
    for p in psutil.process_iter(["cmdline"]):
        if str(out_dir) in " ".join(p.info["cmdline"] or []):
            strays.append(p)
    assert strays == []
