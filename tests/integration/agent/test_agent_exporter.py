"""Two real `edl-agent run` processes train the digits example as 2 gloo ranks on 127.0.0.1.

Scraped over HTTP while training: counters grow, the world is 2 with ranks 0 and 1, and
`promtool check metrics` accepts the exposition. After training the counters are exact.
Once with Paddle (the demo's agents) and once with PyTorch (the same MLP, data and steps,
launched with torchrun's variables): the same series, the same exact figures.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from examples.demo.probe import fetch, free_port, scrape
from tests.support.local_agents import REPO_ROOT, LocalAgent, start_agents, stop_agents
from tests.support.waiting import wait_for

EPOCHS = 60
BATCH = 32
TRAIN_SAMPLES = 1437  # 80% of scikit-learn's 1797 digits
STEPS = EPOCHS * (TRAIN_SAMPLES // (BATCH * 2))
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


@pytest.fixture(scope="module", params=["paddle", "torch"])
def agents(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[list[LocalAgent]]:
    workdir = tmp_path_factory.mktemp("agents")
    args = ["--epochs", str(EPOCHS), "--batch-size", str(BATCH)]
    if request.param == "torch":
        started = start_torch_agents(workdir, args)
    else:
        started = start_agents(2, workdir, args, flush_seconds=0.2, linger_seconds=120)
    try:
        for a in started:
            a.wait_for_port(60)
        yield started
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


def test_counters_grow_while_training_and_the_world_is_two(agents: list[LocalAgent]) -> None:
    # Both ranks first, then both again: the ranks step in lockstep, so neither can have
    # finished training between its two scrapes.
    firsts = [
        scraped_when(a, "a first step", lambda m: m["edl_trainer_steps_total"] > 0, 120)
        for a in agents
    ]
    for a, first in zip(agents, firsts, strict=True):

        def more(m: Metrics, f: Metrics = first) -> bool:
            return m["edl_trainer_steps_total"] > f["edl_trainer_steps_total"]

        later = scraped_when(a, "more steps", more, 60)
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
def test_promtool_accepts_the_exposition(agents: list[LocalAgent]) -> None:
    for a in agents:
        status, body = fetch(f"http://127.0.0.1:{a.port}/metrics")
        assert status == 200
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=30
        )
        assert check.returncode == 0, check.stdout + check.stderr


def test_after_training_the_counters_are_exact(agents: list[LocalAgent]) -> None:
    for a in agents:
        final = scraped_when(a, "the trainer's end", lambda m: m["edl_trainer_up"] == 0, 240)
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


def test_sigterm_ends_a_lingering_agent_with_the_trainer_status(agents: list[LocalAgent]) -> None:
    for a in agents:
        scraped_when(a, "the trainer's end", lambda m: m["edl_trainer_up"] == 0, 240)
    stop_agents(agents, timeout=30)
    assert [a.proc.returncode for a in agents] == [0, 0]
