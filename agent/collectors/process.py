"""CPU seconds and resident memory of the trainer's process tree, via psutil.

The CPU counter must stay monotonic per pod while trainers and their children come and go, so
the meter remembers the last CPU time it saw for every process (keyed by pid and start time,
against pid reuse) and keeps the figure of a process that has gone. CPU a process used between
the last scrape and its exit is therefore not counted; the counter never goes back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class CpuTimes(Protocol):
    """CPU times of one process (psutil's `pcputimes`)."""

    @property
    def user(self) -> float: ...  # noqa: D102
    @property
    def system(self) -> float: ...  # noqa: D102


class MemoryInfo(Protocol):
    """Memory of one process (psutil's `pmem`)."""

    @property
    def rss(self) -> int: ...  # noqa: D102


class ProcessLike(Protocol):
    """The part of `psutil.Process` the meter uses; tests may pass a fake."""

    @property
    def pid(self) -> int: ...  # noqa: D102

    def create_time(self) -> float: ...  # noqa: D102
    def cpu_times(self) -> CpuTimes: ...  # noqa: D102
    def memory_info(self) -> MemoryInfo: ...  # noqa: D102
    def children(self, recursive: bool = False) -> Sequence[ProcessLike]: ...  # noqa: D102


@dataclass(frozen=True)
class ProcessTreeSample:
    """One reading of the trainer tree."""

    cpu_seconds_total: float
    """User + system CPU seconds of every trainer process seen so far (monotonic)."""
    resident_bytes: int
    """RSS summed over the live tree now (0 without a trainer)."""


class ProcessTreeMeter:
    """Measures a process tree rooted at a pid, keeping CPU seconds monotonic across exits."""

    def __init__(self, process_for: Callable[[int], ProcessLike] = psutil.Process) -> None:
        self._process_for = process_for
        self._lock = threading.Lock()
        self._live: dict[tuple[int, float], float] = {}
        self._gone_cpu = 0.0
        self._last_total = 0.0

    def sample(self, root_pid: int | None) -> ProcessTreeSample:
        """Reads the tree under `root_pid` (None: no trainer running)."""
        with self._lock:
            seen: dict[tuple[int, float], float] = {}
            rss = 0
            if root_pid is not None:
                for proc in self._tree(root_pid):
                    try:
                        with_cpu = proc.cpu_times()
                        key = (proc.pid, proc.create_time())
                        mem = proc.memory_info().rss
                    except psutil.Error:
                        continue
                    seen[key] = float(with_cpu.user + with_cpu.system)
                    rss += int(mem)
            for key, cpu in self._live.items():
                if key not in seen:
                    self._gone_cpu += cpu
            self._live = seen
            total = max(self._last_total, self._gone_cpu + sum(seen.values()))
            self._last_total = total
            return ProcessTreeSample(total, rss)

    def _tree(self, root_pid: int) -> list[ProcessLike]:
        try:
            root = self._process_for(root_pid)
            children: list[ProcessLike] = list(root.children(recursive=True))
        except psutil.Error:
            return []
        return [root, *children]


class TrainerProcessCollector(Collector):
    """Exports the trainer tree's CPU seconds counter and RSS gauge."""

    NAME = "trainer_process"

    def __init__(self, meter: ProcessTreeMeter, trainer_pid: Callable[[], int | None]) -> None:
        self._meter = meter
        self._trainer_pid = trainer_pid

    def collect(self) -> Iterable[Metric]:
        """Yields `edl_trainer_process_cpu_seconds_total` and `..._resident_memory_bytes`."""
        s = self._meter.sample(self._trainer_pid())
        return [
            CounterMetricFamily(
                "edl_trainer_process_cpu_seconds_total",
                "User and system CPU time of the trainer process tree (all incarnations).",
                value=s.cpu_seconds_total,
            ),
            GaugeMetricFamily(
                "edl_trainer_process_resident_memory_bytes",
                "Resident memory of the live trainer process tree.",
                value=s.resident_bytes,
            ),
        ]
