"""What the elastic scale tests read from the agents: their metrics, readiness and the worlds.

Shared by the pod runner's test (tests/e2e/agent/test_elastic_scale.py, PyTorch) and the
kubelet one (tests/e2e/agent/test_kubelet_elastic.py, Paddle): each agent serves `/metrics`
and `/readyz` on its pod IP (a local process's address, or a host-network pod's node address).
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable

from tests.e2e.harness.elastic_job import WorldWatch
from tests.support.waiting import wait_for

PAUSE = "edl_trainer_rescale_pause_seconds"
FINISHED = "edl_trainer_job_finished"


def metrics(ip: str, port: int) -> dict[str, float]:
    """The agent's unlabelled samples, name -> value (`edl_trainer_*` only)."""
    url = f"http://{ip}:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"(edl_trainer_[a-z_]+) ([0-9.e+-]+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def ready_finished(ip: str, port: int) -> bool:
    """Whether the agent's `/readyz` answers 200 with the finished job."""
    url = f"http://{ip}:{port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200 and "finished at step" in resp.read().decode()
    except OSError:
        return False


def new_pauses(
    seen: dict[str, dict[str, float]], before: dict[str, tuple[float, float]]
) -> dict[float, float]:
    """rescale count -> the pause just added, for each agent whose histogram grew."""
    out = {}
    for ip, m in seen.items():
        count, total = m.get(PAUSE + "_count", 0.0), m.get(PAUSE + "_sum", 0.0)
        old_count, old_total = before.get(ip, (0.0, 0.0))
        if count > old_count:
            out[count] = total - old_total
    return out


class Pauses:
    """The agents' rescale pauses seen so far; which agents agree on a world."""

    def __init__(self, port: int, addresses: Callable[[], list[str]]) -> None:
        self.port = port
        self.addresses = addresses
        """The IPs of the running trainer pods."""
        self.seen: dict[str, tuple[float, float]] = {}  # pod IP -> (count, sum) of its pauses

    def agree(self, size: int, gen: int) -> dict[str, dict[str, float]] | None:
        """Every running pod's agent exports this world (the metrics the HPA side reads), and
        a survivor has recorded the rescale's pause (at its first step in the new world)."""
        seen = {ip: metrics(ip, self.port) for ip in self.addresses()}
        ok = len(seen) == size and all(
            m.get("edl_trainer_world_size") == size and m.get("edl_trainer_generation") == gen
            for m in seen.values()
        )
        return seen if ok and (gen == 1 or new_pauses(seen, self.seen)) else None

    def last(self, seen: dict[str, dict[str, float]]) -> float:
        """The newest pause of the longest-lived survivor (the one with the most rescales)."""
        fresh = new_pauses(seen, self.seen)
        for ip, m in seen.items():
            self.seen[ip] = (m.get(PAUSE + "_count", 0.0), m.get(PAUSE + "_sum", 0.0))
        return fresh[max(fresh)] if fresh else 0.0


def finished_pods_idle(
    addresses: Callable[[], list[str]],
    port: int,
    scale: Callable[[int], None],
    watch: WorldWatch,
    logs: Callable[[], str],
) -> None:
    """After the end the last pod idles (not restarted, no trainer, ready); one added after
    the end (an HPA scale-up) reads the finished world and idles too, training nothing."""
    (survivor,) = wait_for(
        lambda: [ip for ip in addresses() if metrics(ip, port).get(FINISHED) == 1] or None,
        timeout_s=30,
        what="the last agent exporting the finished job",
        describe=logs,
    )
    step = watch.global_step()
    scale(2)
    late = wait_for(
        lambda: (
            [
                ip
                for ip in addresses()
                if ip != survivor
                and metrics(ip, port).get(FINISHED) == 1
                and ready_finished(ip, port)
            ]
            or None
        ),
        timeout_s=180,  # its warm trainer, started before the finish was read, goes first
        what="a pod added after the end idling ready (its warm trainer gone)",
        describe=logs,
    )
    # Ready and finished means idle: the late agent's warm trainer is gone, none restarts.
    for ip in (survivor, *late):
        assert metrics(ip, port).get("edl_trainer_up") == 0 and ready_finished(ip, port)
    assert len(addresses()) == 2 and watch.global_step() == step


def goes_through(sizes: list[int], targets: list[int]) -> bool:
    """Whether the worlds' sizes start at ``targets[0]`` and reach each next target in order,
    every size on the way strictly toward it (an intermediate world, never an overshoot)."""
    if not sizes or sizes[0] != targets[0]:
        return False
    at, last = 0, sizes[0]
    for size in sizes[1:]:
        if at + 1 >= len(targets):
            return False  # a world after the last target
        here, goal = targets[at], targets[at + 1]
        toward = last < size <= goal if goal > here else goal <= size < last
        if not toward:
            return False
        last = size
        if size == goal:
            at += 1
    return at == len(targets) - 1
