"""Background flushing of a trainer's counters to its report file.

A daemon thread wakes every `interval` seconds, snapshots the recorder and rewrites the
report. The training loop never waits for it; a failing write is logged once and retried at the
next tick, because losing a metric must never stop training.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent.errors import MetricsDirError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.recording import StepRecorder
from agent.trainer.reports import TrainerReport, write_report


class ReportFlusher:
    """Periodically writes `recorder`'s counters to `path` as this incarnation's report."""

    def __init__(
        self,
        recorder: StepRecorder,
        path: Path,
        world: TrainerWorld,
        incarnation: int,
        interval: float = 1.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"flush interval must be > 0, got {interval}")
        self._recorder = recorder
        self._path = path
        self._world = world
        self._incarnation = incarnation
        self._interval = interval
        self._wall = wall
        self._started_unix = wall()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._failing = False
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> Path:
        """The report file this flusher writes."""
        return self._path

    def start(self) -> None:
        """Writes a first (empty) report at once, then keeps flushing on a daemon thread.

        Raises:
            MetricsDirError: the first report cannot be written.
        """
        try:
            with self._lock:
                write_report(self._path, self._report())
        except OSError as e:
            raise MetricsDirError(f"cannot write trainer metrics to {self._path}: {e}") from e
        self._thread = threading.Thread(target=self._run, name="edl-report-flusher", daemon=True)
        self._thread.start()

    def flush(self) -> bool:
        """Writes the report now; returns False (and logs once per outage) if it failed."""
        report = self._report()
        with self._lock:
            try:
                write_report(self._path, report)
            except OSError as e:
                if not self._failing:
                    print(
                        f"edl: cannot write trainer metrics to {self._path}: {e}", file=sys.stderr
                    )
                self._failing = True
                return False
            self._failing = False
            return True

    def _report(self) -> TrainerReport:
        return TrainerReport(
            incarnation=self._incarnation,
            pid=os.getpid(),
            started_unix=self._started_unix,
            updated_unix=self._wall(),
            rank=self._world.rank,
            world_size=self._world.world_size,
            generation=self._world.generation,
            counters=self._recorder.snapshot(),
        )

    def close(self) -> None:
        """Stops the thread and writes a final report (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self._interval + 1)
            self._thread = None
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
