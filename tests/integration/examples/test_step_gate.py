"""The examples' `--step-gate`: a held job trains no step past the gate, answers a stop while it
waits, and once released trains to its end with every sample exactly once (the ledger's).

A real trainer process (the PyTorch elastic example, bare: world of 1, no agent).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.protocol.control import RESCALE_EXIT
from agent.trainer.ledger import verify
from agent.trainer.step_gate import StepGate
from tests.support.digits_job import NUM_TRAIN, ROOT
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

EPOCHS = 2
STEPS = EPOCHS * -(-NUM_TRAIN // 64)


def started_steps(ledger: Path) -> list[int]:
    return sorted(
        int(json.loads(line)["s"])
        for path in ledger.glob("ledger-*.jsonl")
        for line in path.read_text().splitlines()
        if '"s":' in line
    )


def trainer(tmp: Path, gate: StepGate) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EDL_SAMPLE_LEDGER": str(tmp / "ledger")}
    log = (tmp / "trainer.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "examples.train_digits_torch_elastic", "--epochs", str(EPOCHS),
         "--seed", "3", "--step-gate", str(gate.path), "--result", str(tmp / "result.json")],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_a_held_job_waits_at_the_gate_then_trains_to_its_end_exactly_once(tmp_path: Path) -> None:
    gate = StepGate(tmp_path / "gate")
    gate.allow(7)
    proc = trainer(tmp_path, gate)
    try:
        wait_for(
            lambda: started_steps(tmp_path / "ledger") == list(range(7)),
            timeout_s=240,
            what="7 steps started",
            give_up=lambda: proc.poll() is not None,
        )
        gate.allow(12)  # a few more
        wait_for(
            lambda: started_steps(tmp_path / "ledger") == list(range(12)),
            timeout_s=60,
            what="12 steps started",
            give_up=lambda: proc.poll() is not None,
        )
        assert proc.poll() is None and not (tmp_path / "result.json").exists()
        gate.allow_all()
        assert proc.wait(240) == 0
    finally:
        proc.kill()
        proc.wait()
    final = json.loads((tmp_path / "result.json").read_text())
    report = verify(tmp_path / "ledger")
    assert report.problems(NUM_TRAIN, EPOCHS) == []
    assert final["global_step"] == report.steps == STEPS


def test_a_stop_while_held_ends_the_trainer_at_the_gate(tmp_path: Path) -> None:
    gate = StepGate(tmp_path / "gate")
    gate.allow(5)
    proc = trainer(tmp_path, gate)
    try:
        wait_for(
            lambda: started_steps(tmp_path / "ledger") == list(range(5)),
            timeout_s=240,
            what="5 steps started",
            give_up=lambda: proc.poll() is not None,
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == RESCALE_EXIT  # stopped at the boundary, as for a rescale
    finally:
        proc.kill()
        proc.wait()
    assert started_steps(tmp_path / "ledger") == list(range(5))  # no step past the gate
