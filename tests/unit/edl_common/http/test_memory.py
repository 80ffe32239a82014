"""The memory budget: the container's limit from cgroup files, and the high-water check."""

from __future__ import annotations

from pathlib import Path

import pytest

from edl_common.http.memory import (
    RECLAIM_S,
    SAMPLE_S,
    MemoryBudget,
    container_memory_limit,
    process_rss,
)

pytestmark = pytest.mark.unit

MIB = 1 << 20


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_the_tightest_limit_on_the_process_path(tmp_path: Path) -> None:
    _write(tmp_path / "proc-cgroup", "0::/kubepods/pod1/ctr\n")
    root = tmp_path / "cg"
    _write(root / "kubepods/pod1/ctr/memory.max", "max\n")
    _write(root / "kubepods/pod1/memory.max", f"{512 * MIB}\n")
    _write(root / "kubepods/memory.max", f"{8192 * MIB}\n")
    assert container_memory_limit(root, tmp_path / "proc-cgroup") == 512 * MIB


def test_cgroup_v2_in_a_namespace_and_without_a_limit(tmp_path: Path) -> None:
    _write(tmp_path / "proc-cgroup", "0::/\n")
    _write(tmp_path / "cg/memory.max", f"{256 * MIB}\n")
    assert container_memory_limit(tmp_path / "cg", tmp_path / "proc-cgroup") == 256 * MIB
    _write(tmp_path / "cg/memory.max", "max\n")
    assert container_memory_limit(tmp_path / "cg", tmp_path / "proc-cgroup") is None


def test_cgroup_v1_and_a_hybrid_mount(tmp_path: Path) -> None:
    # a hybrid host: v2's group has no memory controller; v1's `memory` hierarchy has the limit
    _write(tmp_path / "proc-cgroup", "9:name=systemd:/\n4:memory:/job/7\n0::/\n")
    root = tmp_path / "cg"
    _write(root / "memory/job/7/memory.limit_in_bytes", f"{300 * MIB}\n")
    _write(root / "memory/memory.limit_in_bytes", "9223372036854771712\n")  # no limit
    assert container_memory_limit(root, tmp_path / "proc-cgroup") == 300 * MIB
    _write(root / "memory/job/7/memory.limit_in_bytes", "9223372036854771712\n")
    assert container_memory_limit(root, tmp_path / "proc-cgroup") is None


def test_no_cgroup_files_is_no_limit(tmp_path: Path) -> None:
    assert container_memory_limit(tmp_path, tmp_path / "missing") is None


def test_the_process_resident_memory_is_read() -> None:
    assert 10 * MIB < process_rss() < 64 * 1024 * MIB


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_check_reads_memory_at_most_every_sample_and_counts_charges_in_between() -> None:
    readings: list[int] = []
    rss = [100 * MIB]

    def read() -> int:
        readings.append(rss[0])
        return rss[0]

    clock = Clock()
    budget = MemoryBudget(1000 * MIB, admit_ratio=0.5, rss=read, clock=clock)
    assert budget.high_water == 500 * MIB
    assert budget.fits(0, 300 * MIB)
    assert not budget.fits(300 * MIB, 150 * MIB)  # charged since the reading: 100+300+150
    rss[0] = 50 * MIB  # memory given back: seen at the next reading only
    assert not budget.fits(300 * MIB, 150 * MIB)
    assert len(readings) == 1
    clock.now += SAMPLE_S
    assert budget.fits(300 * MIB, 150 * MIB)  # 50 read with 300 charged: 50 more room
    assert len(readings) == 2


def test_no_room_asks_for_freed_memory_back_at_most_every_reclaim_interval() -> None:
    rss = [600 * MIB]
    asked: list[float] = []
    clock = Clock()

    def reclaim() -> None:
        asked.append(clock.now)
        rss[0] = 450 * MIB  # glibc gave its free pages back

    budget = MemoryBudget(1000 * MIB, 0.5, rss=lambda: rss[0], reclaim=reclaim, clock=clock)
    assert budget.fits(0, 10 * MIB)  # 450 after the reclaim
    assert asked == [0.0]
    rss[0] = 600 * MIB
    clock.now += 1.0
    assert not budget.fits(0, 10 * MIB)  # too soon to ask again
    assert asked == [0.0]
    clock.now += RECLAIM_S
    assert budget.fits(0, 10 * MIB) and len(asked) == 2
