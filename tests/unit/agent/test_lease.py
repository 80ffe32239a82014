"""A trainer dies with its agent: the lease pipe, end to end with real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from agent.protocol import env as names
from agent.trainer.lease import AgentLease, watch_agent

ROOT = Path(__file__).resolve().parents[3]

AGENT = """
import sys, time
from pathlib import Path
from agent.protocol.trainer_world import TrainerWorld
from agent.process.trainer_supervisor import TrainerSupervisor
trainer = [sys.executable, "-c", '''
import os, time
from agent.trainer.lease import watch_agent
assert watch_agent(os.environ) is not None
print("trainer ready", flush=True)
time.sleep(120)
''']
sup = TrainerSupervisor(trainer, Path(sys.argv[1]), TrainerWorld(), {"PYTHONPATH": sys.argv[2]})
print(sup.start(), flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_a_trainer_stops_when_its_agent_is_sigkilled(tmp_path: Path) -> None:
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(tmp_path), str(ROOT)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        trainer = psutil.Process(int(agent.stdout.readline()))
        assert agent.stdout.readline().strip() == "trainer ready"
        assert trainer.is_running()
        agent.kill()  # no handler runs: only the kernel closing the pipe can tell the trainer
        agent.wait(10)
        gone, _ = psutil.wait_procs([trainer], timeout=30)
        assert gone, "the orphaned trainer kept running"
    finally:
        agent.kill()
        agent.wait(10)


def test_the_lease_notices_the_closed_write_end_at_once() -> None:
    read, write = os.pipe()
    lost = threading.Event()
    lease = AgentLease(read, on_lost=lost.set).start()
    time.sleep(0.2)  # the thing under test: an open write end keeps the lease, for any time
    assert lease.alive and not lost.is_set()
    os.close(write)
    assert lost.wait(30) and not lease.alive
    os.close(read)


def test_no_lease_without_an_agent() -> None:
    assert watch_agent({}) is None
    assert watch_agent({names.AGENT_LEASE_FD: "not-a-number"}) is None
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    assert watch_agent({names.AGENT_LEASE_FD: str(read)}) is None  # not inherited: nothing
