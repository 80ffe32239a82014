"""Elastic digits training through real agents and a real gloo collective on 127.0.0.1.

The world goes 1 -> 3 -> 2 -> 1: agents B and C join, C's trainer is SIGKILLed mid-step (a
scale-down, not a job failure), B is SIGTERMed (a clean leave). The ledger must show every
sample of every epoch trained exactly once in the lineage of the final model, the restored
global step never goes back, and the accuracy matches a one-process run of the same seed.
The same scenario runs for each framework (Paddle, PyTorch) in both re-init modes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from agent.protocol.control import ControlChannel, Timings
from agent.trainer.ledger import verify

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
EPOCHS = 10
TRAIN_ARGS = ["--epochs", str(EPOCHS), "--global-batch", "64", "--seed", "3"]
NUM_TRAIN = 1437  # 80 % of sklearn's 1797 digits
SCRIPTS = {
    "paddle": "examples.train_digits_elastic",
    "torch": "examples.train_digits_torch_elastic",
}
"""The same elastic digits example, per framework."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    what: str, check: Callable[[], bool], timeout: float, procs: dict[str, subprocess.Popen[bytes]]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    states = {n: p.poll() for n, p in procs.items()}
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; agents {states}")


class Job:
    """Agents of one elastic job on a local membership store, started and stopped by a test."""

    def __init__(
        self,
        tmp: Path,
        train_args: list[str] = TRAIN_ARGS,
        step_sleep: float = 0.1,
        script: str = SCRIPTS["paddle"],
    ) -> None:
        self.tmp = tmp
        self.script = script
        self.train_args = train_args
        self.step_sleep = step_sleep
        self.store = tmp / "store"
        self.ledger = tmp / "ledger"
        self.result = tmp / "result.json"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.extra_env: dict[str, str] = {}
        """Set in every agent this job starts."""

    def start(self, name: str, on_finished: str = "exit", **extra_env: str) -> None:
        """Starts agent `name`; by default it exits 0 once the job is done (as a Job would)."""
        port = free_port()
        env = {
            **os.environ,
            "EDL_MEMBER_ID": name,
            "EDL_ELASTIC_DIR": str(self.tmp / name),
            "EDL_SAMPLE_LEDGER": str(self.ledger),
            "EDL_DEBOUNCE": "2",
            "EDL_MEMBER_TTL": "8",
            "EDL_DRAIN_TIMEOUT": "30",
            "EDL_INIT_TIMEOUT": "90",
            "PYTHONPATH": str(ROOT),
            **self.extra_env,
            **extra_env,
        }
        cmd = [PY, "-m", "agent", "run", "--host", "127.0.0.1", "--port", str(port),
               "--elastic", "--job", "digits", "--membership", f"local:{self.store}",
               "--min", "1", "--max", "4", "--on-finished", on_finished, "--",
               PY, "-m", self.script, *self.train_args,
               "--step-sleep", str(self.step_sleep), "--result", str(self.result)]  # fmt: skip
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
        self.ports[name] = port

    def world(self) -> tuple[int, int]:
        try:
            raw = json.loads((self.store / "digits" / "world.json").read_text())
            return int(raw["generation"]), len(raw["members"])
        except (OSError, ValueError, KeyError):
            return 0, 0

    def steps_done(self) -> int:
        """The highest global step any trainer has started (from the ledger)."""
        best = -1
        for path in self.ledger.glob("ledger-*.jsonl"):
            for line in path.read_text().splitlines():
                if '"s":' in line:
                    best = max(best, int(json.loads(line)["s"]))
        return best

    def timings(self) -> list[Timings]:
        """Every generation's timings reported by every trainer of this job."""
        found = []
        for path in self.tmp.glob("*/control/timings-g*.json"):
            found.append(Timings.from_json(path.read_text()))
        return found

    def stepped(self, name: str, generation: int, steps: int) -> bool:
        """`name`'s trainer finished `steps` steps in `generation` (its first step is marked)."""
        timings = ControlChannel(self.tmp / name / "control").timings(generation)
        first = None if timings is None else timings.first_step
        return first is not None and time.time() - first > steps * 0.05

    def trainer_of(self, name: str) -> psutil.Process:
        kids = psutil.Process(self.procs[name].pid).children()
        assert kids, f"{name} has no trainer"
        return kids[0]

    def metrics(self, name: str) -> str:
        url = f"http://127.0.0.1:{self.ports[name]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()

    def readyz(self, name: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.ports[name]}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def ledger_lines(self) -> int:
        return sum(len(p.read_text().splitlines()) for p in self.ledger.glob("ledger-*.jsonl"))

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if self.script in cmd and str(self.result) in cmd:
                proc.kill()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    j = Job(tmp_path)
    try:
        yield j
    finally:
        j.stop_all()
        for name in j.procs:
            log = tmp_path / f"{name}.log"
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-25:]
                print(f"---- {name}\n" + "\n".join(tail))


def reference_accuracy(
    tmp: Path, train_args: list[str] = TRAIN_ARGS, script: str = SCRIPTS["paddle"]
) -> float:
    out = tmp / "reference.json"
    subprocess.run(
        [PY, "-m", script, *train_args, "--result", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, timeout=300,
        capture_output=True,
    )  # fmt: skip
    return float(json.loads(out.read_text())["accuracy"])


@pytest.mark.timeout(420)
@pytest.mark.parametrize("reinit", ["auto", "process"])
@pytest.mark.parametrize("framework", list(SCRIPTS))
def test_world_1_3_2_1_with_a_killed_trainer_loses_and_repeats_nothing(
    job: Job, framework: str, reinit: str
) -> None:
    """`auto` re-initialises survivors in-process where the framework allows (the self-test);
    `process` is the fallback. The agents are not told the framework: they learn it from the
    warm trainer."""
    sizes: list[int] = []

    def at(size: int, steps: int, who: str) -> Callable[[], bool]:
        def check() -> bool:
            gen, n = job.world()
            if n and (not sizes or sizes[-1] != n):
                sizes.append(n)
            return n == size and job.stepped(who, gen, steps)

        return check

    job.extra_env["EDL_REINIT"] = reinit
    job.script = SCRIPTS[framework]
    job.start("a")
    wait_for("world of 1 training", at(1, 10, "a"), 120, job.procs)
    job.start("b")
    job.start("c")
    wait_for("world of 3 training", at(3, 20, "a"), 150, job.procs)

    job.trainer_of("c").send_signal(signal.SIGKILL)
    assert job.procs["c"].wait(60) == 128 + signal.SIGKILL  # c's agent leaves with the status
    wait_for("world of 2 training", at(2, 20, "a"), 150, job.procs)
    metrics = job.metrics("a")

    job.procs["b"].send_signal(signal.SIGTERM)
    assert job.procs["b"].wait(60) == 0
    wait_for("the job to end", lambda: job.procs["a"].poll() is not None, 240, job.procs)
    at(1, 0, "a")()

    assert job.procs["a"].returncode == 0
    assert sizes == [1, 3, 2, 1]
    report = verify(job.ledger)
    assert report.problems(NUM_TRAIN, EPOCHS) == []
    assert len(report.generations) >= 4
    final = json.loads(job.result.read_text())
    assert final["global_step"] == report.steps == EPOCHS * -(-NUM_TRAIN // 64)
    assert final["world_size"] == 1
    assert abs(final["accuracy"] - reference_accuracy(job.tmp, script=job.script)) <= 0.01

    assert "edl_trainer_rescales_total 2.0" in metrics
    assert "edl_trainer_job_finished 0.0" in metrics
    late_agents_do_not_restart_the_finished_job(job, final["global_step"])
    timings = job.timings()
    assert {t.reinit for t in timings} == ({"in-process"} if reinit == "auto" else {"process"})
    assert {t.framework for t in timings} == {framework}
    for phase in ("detect", "drain", "rendezvous", "init", "restore"):
        assert f'edl_trainer_rescale_phase_seconds_total{{phase="{phase}"}}' in metrics


def late_agents_do_not_restart_the_finished_job(job: Job, final_step: int) -> None:
    """A pod that starts after the end (a Deployment's restart, an HPA scale-up) reads the
    finished world: by default it idles ready without a trainer; with `exit` it exits 0."""
    record = json.loads((job.store / "digits" / "world.json").read_text())
    assert record["finished"] is True and record["finished_at_step"] == final_step
    lines = job.ledger_lines()
    job.start("late", on_finished="idle")  # the agent's default
    wait_for("the late agent ready", lambda: job.readyz("late")[0] == 200, 60, job.procs)
    assert f"job digits finished at step {final_step}; idling" in job.readyz("late")[1]
    time.sleep(3)  # what a trainer would need to start (it imports Paddle)
    assert job.procs["late"].poll() is None
    assert psutil.Process(job.procs["late"].pid).children() == []
    assert "edl_trainer_job_finished 1.0" in job.metrics("late")
    assert "edl_trainer_up 0.0" in job.metrics("late")
    assert job.ledger_lines() == lines
    assert json.loads((job.store / "digits" / "world.json").read_text()) == record
    job.procs["late"].send_signal(signal.SIGTERM)
    assert job.procs["late"].wait(15) == 0

    t0 = time.monotonic()
    job.start("late-exit", on_finished="exit")
    assert job.procs["late-exit"].wait(30) == 0
    assert time.monotonic() - t0 < 30 and job.ledger_lines() == lines
    log = (job.tmp / "late-exit.log").read_text()
    assert f"job digits already finished at step {final_step}; exiting" in log
