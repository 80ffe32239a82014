"""A script that always fails ends Failed within its job's failure budget: real agents.

Two `edl-agent run --elastic` members of one job on a local membership store, each restarted
when it exits as a kubelet restarts a crashed container, run a training script that raises at
start. Their failures are counted in the job's one world record, across members and
restarts; the one over the budget marks the job failed, and from then on no agent starts a
trainer: each ends with status 1 (``--on-finished exit``: a failed Job).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.elastic.world import World
from tests.support.local_agents import REPO_ROOT
from tests.support.waiting import wait_for

BUDGET = 3
ERROR = "ValueError: the learning rate is not a number"
SCRIPT = (
    "import sys; print('loading the digits', file=sys.stderr); "
    "raise ValueError('the learning rate is not a number')"
)


class Member:
    """One member, restarted (a new agent process) each time it exits, like a container."""

    def __init__(
        self, name: str, store: Path, logs: Path, trainer: list[str] | None = None
    ) -> None:
        self.name, self.store, self.logs = name, store, logs
        self.trainer = trainer or [sys.executable, "-c", SCRIPT]
        self.starts = 0
        self.statuses: list[int] = []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.starts += 1
        cmd = [
            sys.executable, "-m", "agent", "run", "--host", "127.0.0.1", "--port", "0",
            "--elastic", "--job", "digits", "--membership", f"local:{self.store}",
            "--on-finished", "exit", "--failure-budget", str(BUDGET), "--failure-window", "10m",
            "--", *self.trainer,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "EDL_MEMBER_ID": self.name}
        with (self.logs / f"{self.name}-{self.starts}.log").open("wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=out, stderr=out)

    def restart_if_crashed(self, failed: bool) -> bool:
        """Restarts a crashed agent until the job is failed; True once this member is over."""
        assert self.proc is not None
        status = self.proc.poll()
        if status is None:
            return False
        if len(self.statuses) < self.starts:
            self.statuses.append(status)
        if status == 0 or (failed and status == 1 and self.starts > 1 and self._saw_failed()):
            return True
        if self.starts >= 2 * BUDGET + 2:  # bounded: never more restarts than this
            return True
        self.start()
        return False

    def _saw_failed(self) -> bool:
        log = (self.logs / f"{self.name}-{self.starts}.log").read_text(errors="replace")
        return "failed (its trainer failures exceeded the budget)" in log

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


def world_of(store: Path) -> World | None:
    path = store / "digits" / "world.json"
    return World.from_json(path.read_text()) if path.exists() else None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_that_always_fails_ends_failed_within_its_budget(tmp_path: Path) -> None:
    store, logs = tmp_path / "store", tmp_path / "logs"
    logs.mkdir()
    members = [Member("a", store, logs), Member("b", store, logs)]
    for m in members:
        m.start()
    try:

        def over() -> bool:
            world = world_of(store)
            failed = world is not None and world.failed
            return all([m.restart_if_crashed(failed) for m in members]) and failed

        wait_for(
            over,
            timeout_s=240,
            what="the job failed and every member over",
            interval_s=0.2,
            describe=lambda: f"world {world_of(store)}\n" + members[0].log_text()[-3000:],
        )
    finally:
        for m in members:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait()
    world = world_of(store)
    assert world is not None and world.failed and world.finished
    # the failures of both members, across restarts: the one over the budget failed the job
    assert len(world.failures) == BUDGET + 1
    assert {f.member for f in world.failures} <= {"a", "b"}
    assert all(f.status == 1 and f.tail[-1] == ERROR for f in world.failures)
    assert all(f.tail[0].startswith("Traceback") and len(f.tail) == 3 for f in world.failures)
    # a crashed agent ends with its trainer's status, and once the job is failed with 1
    for m in members:
        assert m.statuses and set(m.statuses) == {1}, m.statuses
    logs_text = "".join(m.log_text() for m in members)
    assert f"{BUDGET + 1} of budget {BUDGET} within 600 s" in logs_text
    assert "the job is failed" in logs_text
    # what a user sees in the pod's log is the trainer's own stderr, passed through
    assert logs_text.count(ERROR) >= BUDGET + 1
    assert sum(m.starts for m in members) <= 2 * (BUDGET + 1) + 2


TRAINING_SCRIPT = """
import torch
from agent.trainer import ElasticSampler, ElasticTrainer

with ElasticTrainer.start() as et:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    et.register(model, optimizer, ElasticSampler(64, 8, 1))
    for plan in et.steps():
        if et.global_step >= 2:
            raise FloatingPointError(f"loss is NaN at step {et.global_step}")
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_trainer_that_crashes_while_training_fails_the_job_too(tmp_path: Path) -> None:
    """The crash of a trainer that joined its world and stepped (RUNNING, not at import):
    it leaves the world, its failure is counted, and over the budget the job is failed."""
    store, logs = tmp_path / "store", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    member = Member("a", store, logs, [sys.executable, str(script)])
    member.start()
    try:

        def over() -> bool:
            world = world_of(store)
            failed = world is not None and world.failed
            return member.restart_if_crashed(failed) and failed

        wait_for(
            over,
            timeout_s=360,
            what="the job failed",
            interval_s=0.2,
            describe=lambda: f"world {world_of(store)}\n" + member.log_text()[-3000:],
        )
    finally:
        if member.proc is not None and member.proc.poll() is None:
            member.proc.kill()
            member.proc.wait()
    world = world_of(store)
    assert world is not None and world.failed
    assert len(world.failures) == BUDGET + 1 and member.starts == BUDGET + 1
    assert all(
        f.tail[-1].endswith("FloatingPointError: loss is NaN at step 2") for f in world.failures
    )
    text = member.log_text()
    assert text.count("a crash counts as a scale-down") == BUDGET + 1  # each after training
    assert set(member.statuses) == {1}
