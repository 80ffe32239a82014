"""`StepGate.wait`, the fixed-world examples' step boundary: it holds until the file allows
the next step, and gives up (says so) only after its bound."""

from __future__ import annotations

import threading
from pathlib import Path

from agent.trainer.step_gate import StepGate


def test_a_step_the_gate_allows_is_not_held(tmp_path: Path) -> None:
    gate = StepGate(tmp_path / "gate", max_wait_seconds=60)
    gate.allow(5)
    assert gate.wait(4) is True


def test_a_held_step_goes_on_once_the_gate_allows_it(tmp_path: Path) -> None:
    gate = StepGate(tmp_path / "gate", poll_seconds=0.01, max_wait_seconds=60)
    gate.allow(5)
    opener = threading.Timer(0.05, gate.allow, args=(6,))
    opener.start()
    try:
        assert gate.wait(5) is True  # returns once step 6 is allowed, long before 60 s
    finally:
        opener.join(10)
    assert gate.allowed() == 6


def test_the_wait_is_bounded(tmp_path: Path) -> None:
    gate = StepGate(tmp_path / "gate", poll_seconds=0.01, max_wait_seconds=0.05)
    assert gate.wait(0) is False  # no file: no step allowed, the bound ends the wait
