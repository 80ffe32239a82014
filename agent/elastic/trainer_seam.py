"""The trainer process as the elastic supervisor drives it, and what it reads about it.

`Trainer` is the seam: `agent.process.trainer_supervisor.TrainerSupervisor` is the real one (a child
process); tests pass fakes typed against it. `read_progress` is the only place the elastic
agent reads the trainer's report file and process state (for the stall watchdog).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import psutil

from agent.elastic.watchdog import Progress
from agent.process.trainer_supervisor import TrainerExit
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.base import Framework
from agent.trainer.reports import read_report


class Trainer(Protocol):
    """One pod's trainer process: one incarnation at a time."""

    framework: Framework
    """Whose environment variables a world is written in when a trainer starts."""

    @property
    def pid(self) -> int | None:
        """The trainer's pid while it runs."""
        ...

    @property
    def report_path(self) -> Path | None:
        """The current incarnation's report file (None before the first start)."""
        ...

    def start(self, world: TrainerWorld) -> int:
        """Starts a new incarnation in `world`; returns its pid."""
        ...

    def wait(self, timeout: float | None = None) -> TrainerExit | None:
        """Waits up to `timeout` s for the trainer to end; how it ended, or None."""
        ...

    def forward_signal(self, sig: int) -> None:
        """Sends `sig` to the trainer (no-op when none runs)."""
        ...

    def kill(self) -> None:
        """SIGKILL, without waiting."""
        ...

    def update_world(self, world: TrainerWorld) -> None:
        """Records a world the running trainer moved to in-process."""
        ...

    def log_tail(self) -> tuple[str, ...]:
        """The last lines the current (or last) incarnation wrote to stderr."""
        ...


def read_progress(trainer: Trainer) -> tuple[Progress | None, bool]:
    """The trainer's latest report as `Progress` (None: none yet), and if it is stopped.

    Stopped: SIGSTOP or SIGTSTP, as the process state says.
    """
    path = trainer.report_path
    report = read_report(path) if path is not None else None
    progress = None
    if report is not None:
        c = report.counters
        mean = c.step_seconds_sum / c.steps if c.steps else 0.0
        progress = Progress(report.updated_unix, c.last_step_unix, c.steps, mean)
    pid = trainer.pid
    try:
        stopped = pid is not None and psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        stopped = False
    return progress, stopped
