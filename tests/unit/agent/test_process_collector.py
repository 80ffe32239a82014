"""CPU seconds and RSS of the trainer tree: a real process tree, then gone processes."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass

import psutil
import pytest

from agent.collectors.process import ProcessTreeMeter, ProcessTreeSample
from tests.support.waiting import wait_for

BUSY_TREE = """
import subprocess, sys, time
spin = "import time\\nt = time.time()\\nwhile time.time() - t < 30: pass"
child = subprocess.Popen([sys.executable, "-c", spin])
t = time.time()
while time.time() - t < 30:
    pass
"""


@pytest.mark.slow
def test_a_real_tree_is_measured_and_cpu_never_goes_back() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BUSY_TREE])
    meter = ProcessTreeMeter()
    children: list[psutil.Process] = []
    try:

        def busy_tree() -> ProcessTreeSample | None:
            nonlocal children
            sample = meter.sample(proc.pid)
            children = psutil.Process(proc.pid).children()
            return sample if len(children) == 1 and sample.cpu_seconds_total > 0.3 else None

        sample = wait_for(busy_tree, timeout_s=20, what="the busy tree", interval_s=0.1)
        assert sample.resident_bytes > 1_000_000
    finally:
        proc.kill()
        proc.wait()
        for child in children:  # only the grandchild this test started, by its pid
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    after = meter.sample(proc.pid)  # the root is gone (and its child orphaned)
    assert after.cpu_seconds_total >= sample.cpu_seconds_total
    assert meter.sample(None).cpu_seconds_total >= after.cpu_seconds_total
    assert meter.sample(None).resident_bytes == 0


@dataclass
class Times:
    user: float
    system: float


@dataclass
class Mem:
    rss: int


class FakeProcess:
    def __init__(self, pid: int, cpu: float, children: list[FakeProcess] | None = None) -> None:
        self.pid = pid
        self.cpu = cpu
        self._children = children or []

    def create_time(self) -> float:
        return 1.0

    def cpu_times(self) -> Times:
        return Times(self.cpu * 0.75, self.cpu * 0.25)

    def memory_info(self) -> Mem:
        return Mem(1000)

    def children(self, recursive: bool = False) -> list[FakeProcess]:
        return list(self._children)


def test_cpu_of_exited_processes_is_kept_across_trainer_restarts() -> None:
    table: dict[int, FakeProcess] = {}

    def lookup(pid: int) -> FakeProcess:
        if pid not in table:
            raise psutil.NoSuchProcess(pid)
        return table[pid]

    meter = ProcessTreeMeter(lookup)
    worker = FakeProcess(11, 2.0)
    table[10] = FakeProcess(10, 3.0, [worker])
    assert meter.sample(10).cpu_seconds_total == pytest.approx(5.0)
    assert meter.sample(10).resident_bytes == 2000
    del table[10]  # incarnation 1 exits
    assert meter.sample(10).cpu_seconds_total == pytest.approx(5.0)
    table[20] = FakeProcess(20, 0.5)  # incarnation 2 starts from zero
    assert meter.sample(20).cpu_seconds_total == pytest.approx(5.5)
    table[20].cpu = 1.0
    assert meter.sample(20).cpu_seconds_total == pytest.approx(6.0)
