"""Fakes of the elastic supervisor's seams, shared by its unit tests (no tests here)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent.elastic.errors import StoreUnavailable
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


class FakeApi:
    """In-memory API server: resourceVersion bumps on every write, 409 on a stale one."""

    def __init__(self) -> None:
        self.config_maps: dict[str, tuple[dict[str, str], str]] = {}
        self.meta: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
        """Labels and annotations of each ConfigMap, as last written."""
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("connection refused")

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    def get_config_map(self, name: str) -> tuple[dict[str, str], str, dict[str, str]] | None:
        self._check()
        found = self.config_maps.get(name)
        return (dict(found[0]), found[1], dict(self.meta[name][1])) if found else None

    def create_config_map(
        self, name: str, data: dict[str, str], labels: dict[str, str], annotations: dict[str, str]
    ) -> bool:
        self._check()
        if name in self.config_maps:
            return False
        self.config_maps[name] = (dict(data), self._bump())
        self.meta[name] = (dict(labels), dict(annotations))
        return True

    def replace_config_map(
        self,
        name: str,
        data: dict[str, str],
        resource_version: str,
        labels: dict[str, str],
        annotations: dict[str, str],
    ) -> bool:
        self._check()
        found = self.config_maps.get(name)
        if found is None or found[1] != resource_version:
            return False
        self.config_maps[name] = (dict(data), self._bump())
        self.meta[name] = (dict(labels), dict(annotations))
        return True

    def list_leases(self, label_selector: str) -> list[dict[str, Any]]:
        self._check()
        key, _, value = label_selector.partition("=")
        return [dict(v) for v in self.leases.values() if v["labels"].get(key) == value]

    def read_lease(self, name: str) -> dict[str, Any] | None:
        self._check()
        found = self.leases.get(name)
        return None if found is None else dict(found)

    def renew_lease(
        self,
        name: str,
        holder: str,
        renew_time: str,
        annotations: dict[str, str],
        labels: dict[str, str],
    ) -> None:
        self._check()
        self.leases[name] = {
            "name": name,
            "holder": holder,
            "renew_time": renew_time,
            "annotations": annotations,
            "labels": labels,
        }

    def delete_lease(self, name: str) -> None:
        self._check()
        self.leases.pop(name, None)

    def watch_leases(
        self, label_selector: str, timeout_seconds: int
    ) -> Iterator[tuple[str, str, str]]:
        self._check()  # no server push here: the stream ends at once, like a server timeout
        yield from ()

    def watch_config_map(self, name: str, timeout_seconds: int) -> Iterator[tuple[str, str]]:
        self._check()
        yield from ()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.now)
