"""The real `edl-adapter` and agent-like endpoints as processes on 127.0.0.1, for the tests.

An agent-like endpoint serves real prometheus_client counters that grow on a fixed schedule;
the adapter is `edl-adapter serve` over TLS with a self-signed certificate, read back with the
real kubectl (`kubectl get --raw`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from edl_common.quantity import parse_quantity
from tests.support.net import free_port
from tests.support.waiting import wait_for

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
ADAPTER = str(Path(sys.executable).parent / "edl-adapter")
CM = "/apis/custom.metrics.k8s.io"
EXT = "/apis/external.metrics.k8s.io/v1beta1"

# An agent-like endpoint: real prometheus_client counters that grow on a fixed schedule.
# Every 0.1 s one 0.1 s step of `rate/10` samples, 25 % of it communication, GPU 75 % busy.
AGENT_CODE = r"""
import sys, time
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
port, rate = int(sys.argv[1]), float(sys.argv[2])
r = CollectorRegistry()
samples = Counter("edl_trainer_samples_total", "samples", registry=r)
steps = Counter("edl_trainer_steps_total", "steps", registry=r)
duration = Histogram("edl_trainer_step_duration_seconds", "step time", registry=r)
comm = Counter("edl_trainer_comm_seconds_total", "comm time", registry=r)
cpu = Counter("edl_trainer_process_cpu_seconds_total", "cpu", registry=r)
util = Gauge("edl_gpu_utilization_ratio", "util", ["gpu"], registry=r)
util.labels("0").set(0.75)
util.labels("1").set(0.25)
start_http_server(port, addr="127.0.0.1", registry=r)
start = time.monotonic()
for tick in range(1, 6001):  # bounded: 10 minutes at most
    samples.inc(rate / 10)
    steps.inc()
    duration.observe(0.1)
    comm.inc(0.025)
    cpu.inc(0.05)
    time.sleep(max(0.0, start + tick * 0.1 - time.monotonic()))  # the schedule: 10 steps/s
"""


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def spawn(name: str, argv: list[str], workdir: Path) -> Proc:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    return Proc(name, popen, log)


def start_agent(workdir: Path, name: str, rate: float) -> tuple[Proc, int]:
    port = free_port()
    proc = spawn(name, [sys.executable, "-c", AGENT_CODE, str(port), str(rate)], workdir)
    wait_for(
        lambda: requests.get(f"http://127.0.0.1:{port}/metrics", timeout=1).ok,
        timeout_s=30,
        what=f"{name} /metrics",
        interval_s=0.2,
    )
    return proc, port


@dataclass
class Adapter:
    proc: Proc
    port: int
    workdir: Path
    extra_kubectl: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> str:
        """The adapter's self-signed serving certificate (it names 127.0.0.1)."""
        return str(self.workdir / "certs" / "apiserver.crt")

    def kubectl(self, path: str, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [
            KUBECTL,
            "get",
            "--raw",
            path,
            "--server",
            self.url,
            "--insecure-skip-tls-verify",
            "--token",
            "x",
            *self.extra_kubectl,
            *extra,
        ]
        env = {**os.environ, "KUBECONFIG": str(self.workdir / "no-kubeconfig")}
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)

    def get(self, path: str) -> dict[str, Any]:
        out = self.kubectl(path)
        assert out.returncode == 0, f"{path}: {out.stderr}\n{self.proc.tail()}"
        return dict(json.loads(out.stdout))

    def items(self, path: str) -> list[dict[str, Any]]:
        return list(self.get(path)["items"])


def start_adapter(workdir: Path, *args: str) -> Adapter:
    port = free_port()
    argv = [
        ADAPTER,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--cert-dir",
        str(workdir / "certs"),
        *args,
    ]
    proc = spawn(f"adapter-{port}", argv, workdir)

    def healthy() -> bool:
        if proc.popen.poll() is not None:
            raise AssertionError(f"edl-adapter exited: {proc.tail()}")
        cert = workdir / "certs" / "apiserver.crt"
        return requests.get(f"https://127.0.0.1:{port}/healthz", verify=str(cert), timeout=2).ok

    try:
        wait_for(healthy, timeout_s=60, what="edl-adapter /healthz", interval_s=0.2)
    except AssertionError:
        proc.stop()
        raise
    return Adapter(proc, port, workdir)


def value(item: dict[str, Any]) -> float:
    return float(parse_quantity(item["value"]))
