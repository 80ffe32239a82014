"""Fixed-world agents for the integration tests: one `edl-agent run` per gloo rank on loopback.

Each agent serves /metrics on a port it picks itself and runs one rank of
`examples.train_digits` in a world of a fixed size (no elastic membership).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from examples.demo.probe import free_port
from tests.support.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
_SERVING = re.compile(r"serving /metrics on http://[^:]+:(\d+)")


@dataclass
class LocalAgent:
    """One `edl-agent run` process on loopback, with its log file."""

    rank: int
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    def log_text(self) -> str:
        """Everything the agent and its trainer wrote so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for_port(self, timeout: float) -> int:
        """Reads the bound port from the agent's first log line (it listens on port 0)."""
        m = wait_for(
            lambda: _SERVING.search(self.log_text()),
            timeout_s=timeout,
            what=f"agent {self.rank} serving /metrics",
            interval_s=0.05,
            give_up=self.exited,
            describe=self.log_text,
        )
        self.port = int(m.group(1))
        return self.port

    def exited(self) -> str | None:
        """For `wait_for(give_up=...)`: why waiting on this agent is pointless, if it is."""
        code = self.proc.poll()
        return None if code is None else f"agent {self.rank} exited {code}"


def start_agents(
    world_size: int,
    workdir: Path,
    trainer_args: Sequence[str] = (),
    flush_seconds: float = 0.5,
    linger_seconds: float = 0.0,
) -> list[LocalAgent]:
    """Starts one agent per rank, each running `examples.train_digits` in a gloo world."""
    endpoints = [f"127.0.0.1:{free_port()}" for _ in range(world_size)]
    base = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "PADDLE_DISTRI_BACKEND": "gloo",
        "PADDLE_TRAINERS_NUM": str(world_size),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
        "PADDLE_MASTER": endpoints[0],
        "GLOG_minloglevel": "2",
        "PYTHONWARNINGS": "ignore",
    }
    agents = []
    for rank in range(world_size):
        env = {**base, "PADDLE_TRAINER_ID": str(rank), "PADDLE_CURRENT_ENDPOINT": endpoints[rank]}
        log = workdir / f"agent-{rank}.log"
        cmd = [
            sys.executable, "-m", "agent", "run", "--host", "127.0.0.1", "--port", "0",
            "--metrics-dir", str(workdir / f"metrics-{rank}"),
            "--flush-seconds", str(flush_seconds), "--linger-seconds", str(linger_seconds),
            "--", sys.executable, "-m", "examples.train_digits", *trainer_args,
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=out, stderr=out)
        agents.append(LocalAgent(rank, proc, log))
    return agents


def start_idle_agent(workdir: Path) -> LocalAgent:
    """One `edl-agent run` whose trainer only sleeps: its exporter, for the HTTP tests."""
    log = workdir / "agent.log"
    cmd = [
        sys.executable, "-m", "agent", "run", "--host", "127.0.0.1", "--port", "0",
        "--metrics-dir", str(workdir / "metrics"), "--",
        sys.executable, "-c", "import time; time.sleep(600)",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=out)
    return LocalAgent(0, proc, log)


@contextlib.contextmanager
def idle_agent(workdir: Path) -> Iterator[LocalAgent]:
    """:func:`start_idle_agent` with its exporter listening; stopped on exit."""
    started = start_idle_agent(workdir)
    try:
        started.wait_for_port(120)
        yield started
    finally:
        stop_agents([started])


def stop_agents(agents: Sequence[LocalAgent], timeout: float = 30.0) -> None:
    """SIGTERM every agent still running, then SIGKILL what is left after `timeout`."""
    for a in agents:
        if a.proc.poll() is None:
            a.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for a in agents:
        try:
            a.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            a.proc.kill()
            a.proc.wait()
