"""`make demo`: two `edl-agent run` processes train the digits example as 2 gloo ranks.

Everything runs on 127.0.0.1: each agent serves /metrics on a free port and runs one rank of
`examples.train_digits`; the demo scrapes both agents every second, prints throughput, steps,
step time and the communication ratio per rank, then the test accuracy each rank reports.
Meanwhile a real `edl-adapter` serves the agents' metrics through the custom metrics API and
the HPA model says what the example HPA would decide on them (`examples/demo_adapter.py`).
Bounded in time (`--timeout`); exits 0 only if both ranks finished and reported accuracy and
the adapter served every rank.

`start_agents`/`scrape` are reused by the integration tests.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from examples.demo_adapter import PODS_PATH, DemoAdapter, HpaPreview, report

REPO_ROOT = Path(__file__).resolve().parent.parent
_SERVING = re.compile(r"serving /metrics on http://[^:]+:(\d+)")
_ACCURACY = re.compile(r"rank (\d+)/(\d+): test accuracy ([0-9.]+)")


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the usual, slightly racy, loopback trick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _SERVING.search(self.log_text())
            if m:
                self.port = int(m.group(1))
                return self.port
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"agent {self.rank} did not start serving:\n{self.log_text()}")


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
        "GLOG_minloglevel": "2",  # keep Paddle's C++ INFO lines out of the demo
        "PYTHONWARNINGS": "ignore",
    }
    agents = []
    for rank in range(world_size):
        env = {**base, "PADDLE_TRAINER_ID": str(rank), "PADDLE_CURRENT_ENDPOINT": endpoints[rank]}
        log = workdir / f"agent-{rank}.log"
        metrics_dir = workdir / f"metrics-{rank}"
        cmd = [
            sys.executable,
            "-m",
            "agent",
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics-dir",
            str(metrics_dir),
            "--flush-seconds",
            str(flush_seconds),
            "--linger-seconds",
            str(linger_seconds),
            "--",
            sys.executable,
            "-m",
            "examples.train_digits",
            *trainer_args,
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=out, stderr=out)
        agents.append(LocalAgent(rank, proc, log))
    return agents


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


def fetch(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """GET `url`; returns (status, body), (0, reason) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except OSError as e:
        return 0, str(e)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text to {name or name{labels}: value}."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = float(s.value)
    return out


def scrape(port: int) -> dict[str, float] | None:
    """One scrape of an agent's /metrics, or None if it did not answer."""
    status, body = fetch(f"http://127.0.0.1:{port}/metrics")
    return parse_metrics(body) if status == 200 else None


@dataclass
class _Row:
    t: float
    m: dict[str, float]


def _format_row(rank: int, elapsed: float, prev: _Row | None, cur: _Row) -> str:
    m = cur.m
    steps = m.get("edl_trainer_steps_total", 0.0)
    rate = step_ms = ratio = "-"
    if prev is not None:
        dt = cur.t - prev.t
        d_samples = m["edl_trainer_samples_total"] - prev.m["edl_trainer_samples_total"]
        steps_d = steps - prev.m["edl_trainer_steps_total"]
        d_sum = (
            m["edl_trainer_step_duration_seconds_sum"]
            - prev.m["edl_trainer_step_duration_seconds_sum"]
        )
        d_comm = m["edl_trainer_comm_seconds_total"] - prev.m["edl_trainer_comm_seconds_total"]
        if dt > 0:
            rate = f"{d_samples / dt:9.0f}"
        if steps_d > 0:
            step_ms = f"{1000 * d_sum / steps_d:7.2f}"
        if d_sum > 0:
            ratio = f"{d_comm / d_sum:5.2f}"
    return (
        f"{elapsed:6.1f} {rank:>4} {int(m.get('edl_trainer_world_size', 0)):>5} "
        f"{int(steps):>7} {rate:>9} {step_ms:>7} {ratio:>5} "
        f"{m.get('edl_trainer_process_cpu_seconds_total', 0.0):7.1f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="EDL agent demo: 2 gloo ranks on 127.0.0.1")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=180.0, help="give up after (s)")
    opts = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="edl-demo-") as tmp:
        workdir = Path(tmp)
        print("Starting 2 edl-agent processes (one gloo rank each) on 127.0.0.1 ...", flush=True)
        agents = start_agents(
            2,
            workdir,
            ["--epochs", str(opts.epochs), "--batch-size", str(opts.batch_size)],
            flush_seconds=0.5,
            linger_seconds=3.0,
        )
        adapter: DemoAdapter | None = None
        try:
            for a in agents:
                a.wait_for_port(60.0)
            adapter = DemoAdapter(workdir, [a.port for a in agents], free_port())
            adapter.start()
            print(f"  edl-adapter: https://127.0.0.1:{adapter.port}, e.g.")
            print(
                f"    kubectl get --raw '{PODS_PATH}' --server https://127.0.0.1:{adapter.port}"
                " --insecure-skip-tls-verify --token x"
            )
            preview = HpaPreview(sync_period=5.0)
            started = time.monotonic()
            served: list[bool] = []

            def every_5s(elapsed: float) -> None:
                if adapter is not None:
                    served.append(report(adapter, preview, elapsed))

            rc = _watch(agents, opts.timeout, every_5s)
            if rc == 0 and not any(served):
                # A short run can end between two ticks: the window still holds its samples.
                served.append(report(adapter, preview, time.monotonic() - started))
            if rc == 0 and not any(served):
                print("demo failed: the adapter never served the agents' metrics")
                return 1
            return rc
        finally:
            if adapter is not None:
                adapter.stop()
            stop_agents(agents)


def _watch(
    agents: list[LocalAgent], timeout: float, tick: Callable[[float], None] | None = None
) -> int:
    t0 = time.monotonic()
    next_tick = 5.0
    for a in agents:
        a.wait_for_port(60.0)
        print(f"  rank {a.rank}: metrics at http://127.0.0.1:{a.port}/metrics")
    print(
        f"\n{'time':>6} {'rank':>4} {'world':>5} {'steps':>7} {'samples/s':>9} "
        f"{'step ms':>7} {'comm':>5} {'cpu s':>7}"
    )
    prev: dict[int, _Row] = {}
    finished: set[int] = set()
    while time.monotonic() - t0 < timeout and len(finished) < len(agents):
        time.sleep(1.0)
        for a in agents:
            if a.rank in finished:
                continue
            m = scrape(a.port)
            if m is None:
                if a.proc.poll() is not None:
                    finished.add(a.rank)
                continue
            row = _Row(time.monotonic(), m)
            print(_format_row(a.rank, row.t - t0, prev.get(a.rank), row), flush=True)
            prev[a.rank] = row
            if m.get("edl_trainer_up", 1.0) == 0.0 and m.get("edl_trainer_steps_total", 0) > 0:
                finished.add(a.rank)
        if tick is not None and time.monotonic() - t0 >= next_tick:
            tick(time.monotonic() - t0)
            next_tick += 5.0
    ok = len(finished) == len(agents)
    print()
    accuracies = {}
    for a in agents:
        for rank, world, acc in _ACCURACY.findall(a.log_text()):
            accuracies[int(rank)] = float(acc)
            print(f"rank {rank} of {world}: final test accuracy {float(acc):.4f}")
    if not ok or len(accuracies) != len(agents):
        print(f"demo failed (timeout {timeout:.0f} s or a rank crashed); agent logs:")
        for a in agents:
            print(f"--- agent {a.rank}\n{a.log_text()[-3000:]}")
        return 1
    print(
        "comm = all-reduce seconds / step seconds (gloo on loopback, waiting for the other rank "
        "included); see docs/agent.md."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
