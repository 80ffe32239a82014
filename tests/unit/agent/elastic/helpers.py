"""Fakes of the elastic supervisor's seams, shared by its unit tests (no tests here)."""

from __future__ import annotations

import signal
import time
from dataclasses import replace
from pathlib import Path

from agent.process.trainer_supervisor import TrainerExit
from agent.protocol.control import ControlChannel, Timings
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks


class FakeTrainer:
    """A `Trainer` (as TrainerSupervisor + a trainer that follows the control-dir protocol)."""

    def __init__(self, control: Path, exit_status: int, reports: str = "paddle") -> None:
        self.channel = ControlChannel(control)
        self.exit_status = exit_status
        self.reports = reports
        """The framework the fake trainer says it imported."""
        self.framework = frameworks.get("paddle")
        """Set by the supervisor, as on the real TrainerSupervisor."""
        self.worlds: list[TrainerWorld] = []
        self.running = False
        self.generation = -1
        self.exit_at: float | None = None
        self.status = 0
        self.signals: list[int] = []
        self.report_path: Path | None = None
        """Where the fake writes no report (the watchdog has nothing to judge)."""
        self.pid: int | None = None

    def start(self, world: TrainerWorld) -> int:
        self.worlds.append(world)
        self.running, self.generation = True, world.generation
        self._mark(Timings(imported=time.time(), reinit="process", framework=self.reports))
        return 4242

    def update_world(self, world: TrainerWorld) -> None:
        self.worlds.append(world)

    def log_tail(self) -> tuple[str, ...]:
        return ("Traceback (most recent call last):", "RuntimeError: fake trainer crash")

    def _mark(self, timings: Timings) -> None:
        self.channel.report(self.generation, timings)

    def wait(self, timeout: float | None = None) -> TrainerExit | None:
        time.sleep(min(timeout or 0.0, 0.02))  # a fake of a blocking wait: it waits, briefly
        if not self.running:
            return None
        handed = self.channel.next_world()
        if self.generation == 0 and handed is not None:
            self.generation = handed.generation
            now = time.time()
            self._mark(Timings(started=now, imported=now, master=now, initialised=now,
                               first_step=now, framework=self.reports))  # fmt: skip
            self.exit_at = now + 0.3
        if self.exit_at is not None and time.time() >= self.exit_at:
            self.running = False
            status = self.status or self.exit_status
            if status == 0:  # as ElasticTrainer does when the script ends
                reported = self.channel.timings(self.generation)
                assert reported is not None
                self._mark(replace(reported, finished=time.time(), finished_step=184))
            return TrainerExit(status, 1.0, 1)
        return None

    def forward_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if self.running:
            self.exit_at, self.status = time.time(), 128 + sig

    def kill(self) -> None:
        self.forward_signal(signal.SIGKILL)
