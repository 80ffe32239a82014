"""Two real `edl-agent run` processes train the digits example as 2 gloo ranks on 127.0.0.1.

Scraped over HTTP while training: counters grow, the world is 2 with ranks 0 and 1, and
`promtool check metrics` accepts the exposition. After training the counters are exact.
The job is held at a step gate (`--step-gate`) until the tests that watch it train have
looked: it cannot end first however slow the machine.
Once with Paddle (the demo's agents) and once with PyTorch (the same MLP, data and steps,
launched with torchrun's variables): the same series, the same exact figures.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.trainer.step_gate import StepGate
from examples.demo.probe import fetch, free_port, scrape
from tests.support.local_agents import REPO_ROOT, LocalAgent, start_agents, stop_agents
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]

EPOCHS = 20
BATCH = 32
TRAIN_SAMPLES = 1437  # 80% of scikit-learn's 1797 digits
STEPS = EPOCHS * (TRAIN_SAMPLES // (BATCH * 2))
HELD_AT = 5
"""The job's step gate starts here: the first scrapes find it held, the next ones 5 steps on."""
STALL_S = 120.0
"""A job that takes no step for this long has stopped: the wait for its end is bounded by a
failure, not by the machine's speed (60 epochs once took over 240 s at load 10)."""
GRADIENT_BYTES = 4 * (64 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10)  # fp32 MLP 64-64-64-10
GROWING = (
    "edl_trainer_steps_total",
    "edl_trainer_samples_total",
    "edl_trainer_comm_seconds_total",
    "edl_trainer_comm_bytes_total",
    "edl_trainer_step_duration_seconds_count",
)


def start_torch_agents(workdir: Path, trainer_args: Sequence[str]) -> list[LocalAgent]:
    """Like the demo's agents, around `examples.train_digits_torch`, with torchrun's variables."""
    base = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    agents = []
    for rank in range(2):
        log = workdir / f"agent-{rank}.log"
        cmd = [sys.executable, "-m", "agent", "run", "--host", "127.0.0.1", "--port", "0",
               "--metrics-dir", str(workdir / f"metrics-{rank}"), "--flush-seconds", "0.2",
               "--linger-seconds", "120", "--",
               sys.executable, "-m", "examples.train_digits_torch", *trainer_args]  # fmt: skip
        with log.open("wb") as out:
            env = {**base, "RANK": str(rank)}
            proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=out, stderr=out)
        agents.append(LocalAgent(rank, proc, log))
    return agents


@dataclass
class Job:
    """The two agents of one gloo world, and the step gate that holds their trainers."""

    agents: list[LocalAgent]
    gate: StepGate

    def finish(self) -> None:
        """Lets the job train to its end."""
        self.gate.allow_all()


@pytest.fixture(scope="module", params=["paddle", "torch"])
def job(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Job]:
    workdir = tmp_path_factory.mktemp("agents")
    gate = StepGate(workdir / "step-gate")
    gate.allow(HELD_AT)
    args = ["--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--step-gate", str(gate.path)]
    if request.param == "torch":
        started = start_torch_agents(workdir, args)
    else:
        started = start_agents(2, workdir, args, flush_seconds=0.2, linger_seconds=120)
    try:
        for a in started:
            a.wait_for_port(60)
        yield Job(started, gate)
    finally:
        stop_agents(started)


Metrics = dict[str, float]


def scraped_when(
    agent: LocalAgent, what: str, test: Callable[[Metrics], bool], timeout: float
) -> Metrics:
    """The agent's first scrape that passes `test` (`wait_for` over `scrape`)."""

    def passing() -> Metrics | None:
        last = scrape(agent.port)
        return last if last is not None and test(last) else None

    return wait_for(
        passing,
        timeout_s=timeout,
        what=f"agent {agent.rank}: {what}",
        interval_s=0.1,
        give_up=agent.exited,
        describe=lambda: agent.log_text()[-2000:],
    )


def trained_to_its_end(agent: LocalAgent) -> Metrics:
    """The agent's scrape once its trainer has ended (`edl_trainer_up` 0), however long the
    job takes while it keeps stepping; it fails once no step was taken for `STALL_S`."""
    progress = {"steps": -1.0, "at": time.monotonic()}

    def ended() -> Metrics | None:
        m = scrape(agent.port)
        if m is None:
            return None
        if m["edl_trainer_steps_total"] != progress["steps"]:
            progress.update(steps=m["edl_trainer_steps_total"], at=time.monotonic())
        return m if m["edl_trainer_up"] == 0 else None

    def stopped() -> str | None:
        idle = time.monotonic() - progress["at"]
        if idle > STALL_S:
            return f"no step for {idle:.0f} s, at step {progress['steps']:.0f} of {STEPS}"
        return agent.exited()

    return wait_for(
        ended,
        timeout_s=1080,  # a hung test's bound, under the module's; the stall ends it sooner
        what=f"agent {agent.rank}: the trainer's end",
        interval_s=0.2,
        give_up=stopped,
        describe=lambda: agent.log_text()[-2000:],
    )


def steps_are(n: int) -> Callable[[Metrics], bool]:
    return lambda m: m["edl_trainer_steps_total"] == n


def test_counters_grow_while_training_and_the_world_is_two(job: Job) -> None:
    # Held at the gate, then let 5 steps further: the job cannot finish between the scrapes.
    agents = job.agents
    firsts = [scraped_when(a, f"{HELD_AT} steps, held", steps_are(HELD_AT), 180) for a in agents]
    job.gate.allow(2 * HELD_AT)
    for a, first in zip(agents, firsts, strict=True):
        later = scraped_when(a, f"{2 * HELD_AT} steps, held", steps_are(2 * HELD_AT), 120)
        for name in GROWING:
            assert later[name] > first[name], (a.rank, name)
        assert later["edl_trainer_world_size"] == 2
        assert later["edl_trainer_rank"] == a.rank
        assert later["edl_trainer_up"] == 1
        assert later["edl_trainer_restarts_total"] == 1
        assert later["edl_trainer_process_cpu_seconds_total"] > 0
        assert later["edl_trainer_process_resident_memory_bytes"] > 10_000_000
        assert later["edl_gpu_devices"] >= 0
        assert fetch(f"http://127.0.0.1:{a.port}/readyz")[0] == 200
    ranks = sorted(m["edl_trainer_rank"] for a in agents if (m := scrape(a.port)) is not None)
    assert ranks == [0, 1]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) missing")
def test_promtool_accepts_the_exposition(job: Job) -> None:
    for a in job.agents:
        status, body = fetch(f"http://127.0.0.1:{a.port}/metrics")
        assert status == 200
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=30
        )
        assert check.returncode == 0, check.stdout + check.stderr


def test_after_training_the_counters_are_exact(job: Job) -> None:
    job.finish()
    agents = job.agents
    for a in agents:
        final = trained_to_its_end(a)
        assert final["edl_trainer_steps_total"] == STEPS
        assert final["edl_trainer_samples_total"] == STEPS * BATCH
        assert final["edl_trainer_step_duration_seconds_count"] == STEPS
        assert final["edl_trainer_comm_bytes_total"] == STEPS * GRADIENT_BYTES
        assert (
            0
            < final["edl_trainer_comm_seconds_total"]
            < final["edl_trainer_step_duration_seconds_sum"]
        )
        status, body = fetch(f"http://127.0.0.1:{a.port}/readyz")
        assert status == 503 and "exited with status 0" in body
        assert f"rank {a.rank}/2: test accuracy" in a.log_text()
    accuracies = {
        line.split("test accuracy ")[1].split()[0]
        for a in agents
        for line in a.log_text().splitlines()
        if "test accuracy" in line
    }
    assert len(accuracies) == 1, accuracies  # both ranks hold the same model
    assert float(accuracies.pop()) > 0.9


def test_sigterm_ends_a_lingering_agent_with_the_trainer_status(job: Job) -> None:
    job.finish()
    agents = job.agents
    for a in agents:
        trained_to_its_end(a)
    stop_agents(agents, timeout=30)
    assert [a.proc.returncode for a in agents] == [0, 0]
