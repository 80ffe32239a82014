"""Runs the trainer command as a child process and knows what state it is in.

This is the seam elastic training plugs into: `start(world)`, `stop()`, `restart(world)` and
`update_world(world)` are all a world change needs; the supervisor itself decides nothing. Each
start is a new *incarnation* with its own report file in the metrics directory (numbered after
whatever is already there), so trainer counters survive restarts. At start the neutral world is
written in the variables of the trainer's framework (`framework`; Paddle's unless told).

The trainer runs in its own session (process group): signals are forwarded to the whole group,
and when the trainer's main process ends, stragglers left in its group are killed so they cannot
hold the collective's ports against the next incarnation. The other way round, every trainer
holds a lease on this process (the read end of a pipe whose write end only the agent has,
`agent.trainer.lease`): when the agent dies, even by SIGKILL, its trainers stop at once.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.errors import TrainerStartError
from agent.process.log_tail import StderrTail
from agent.process.readiness import Readiness
from agent.protocol import env as names
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks import get as get_framework
from agent.trainer.frameworks.base import Framework
from agent.trainer.reports import next_incarnation, report_path

log = logging.getLogger(__name__)

Launcher = Callable[[Sequence[str], Mapping[str, str]], "subprocess.Popen[bytes]"]
"""Starts the trainer process; the default is `subprocess.Popen` in a new session."""


def _popen(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    lease = env.get(names.AGENT_LEASE_FD, "")
    fds = (int(lease),) if lease.isdigit() else ()
    return subprocess.Popen(list(command), env=dict(env), start_new_session=True, pass_fds=fds)


def _popen_piped(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """As `_popen`, with stderr on a pipe for a `StderrTail`."""
    lease = env.get(names.AGENT_LEASE_FD, "")
    fds = (int(lease),) if lease.isdigit() else ()
    return subprocess.Popen(
        list(command), env=dict(env), start_new_session=True, pass_fds=fds, stderr=subprocess.PIPE
    )


class TrainerState(enum.Enum):
    """Life cycle of the trainer process as the supervisor sees it."""

    NOT_STARTED = "not started"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"
    START_FAILED = "failed to start"


@dataclass(frozen=True)
class TrainerExit:
    """How a trainer incarnation ended."""

    status: int
    """Shell-style exit status: the exit code, or 128+N when killed by signal N."""
    runtime_seconds: float
    incarnation: int

    def describe(self) -> str:
        """One line for logs and `/readyz`."""
        if self.status > 128:
            try:
                name = signal.Signals(self.status - 128).name
            except ValueError:
                name = f"signal {self.status - 128}"
            how = f"was killed by {name} (status {self.status})"
        else:
            how = f"exited with status {self.status}"
        return f"trainer incarnation {self.incarnation} {how} after {self.runtime_seconds:.1f} s"


def shell_status(returncode: int) -> int:
    """Popen's returncode (negative for signals) as a shell exit status."""
    return 128 - returncode if returncode < 0 else returncode


class TrainerSupervisor:
    """Starts, watches, signals and stops the trainer process of one pod."""

    def __init__(
        self,
        command: Sequence[str],
        metrics_dir: Path,
        world: TrainerWorld,
        base_env: Mapping[str, str],
        flush_seconds: float = 1.0,
        stop_grace_seconds: float = 25.0,
        launcher: Launcher | None = None,
        clock: Callable[[], float] = time.monotonic,
        framework: Framework | None = None,
        tail: StderrTail | None = None,
    ) -> None:
        if not command:
            raise TrainerStartError("no trainer command given")
        self._command = tuple(command)
        self._metrics_dir = metrics_dir
        self._world = world
        self._base_env = dict(base_env)
        self._flush_seconds = flush_seconds
        self._stop_grace = stop_grace_seconds
        self._tail = tail
        """Keeps each incarnation's last stderr lines (the trainer's stderr is then piped)."""
        self._launcher = launcher or (_popen if tail is None else _popen_piped)
        self._clock = clock
        self._framework = framework or get_framework("paddle")
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._state = TrainerState.NOT_STARTED
        self._started_at = 0.0
        self._starts = 0
        self._incarnation = 0
        self._next_incarnation = next_incarnation(metrics_dir)
        self._last_exit: TrainerExit | None = None
        self._start_error = ""
        self._lease_read, self._lease_write = os.pipe()  # never inherited, except as passed

    # -- what the exporter reads -------------------------------------------------------------

    @property
    def world(self) -> TrainerWorld:
        """The world the current (or next) trainer incarnation runs in."""
        with self._lock:
            return self._world

    @property
    def framework(self) -> Framework:
        """Whose environment variables a world is written in when a trainer starts."""
        with self._lock:
            return self._framework

    @framework.setter
    def framework(self, framework: Framework) -> None:
        with self._lock:
            self._framework = framework

    @property
    def pid(self) -> int | None:
        """The trainer's pid while it runs."""
        with self._lock:
            if self._proc is not None and self._state in (
                TrainerState.RUNNING,
                TrainerState.STOPPING,
            ):
                return self._proc.pid
            return None

    @property
    def report_path(self) -> Path | None:
        """The report file of the current (or last) incarnation; None before the first start."""
        with self._lock:
            return report_path(self._metrics_dir, self._incarnation) if self._incarnation else None

    @property
    def starts(self) -> int:
        """Trainer processes started by this supervisor (the first included)."""
        with self._lock:
            return self._starts

    @property
    def state(self) -> TrainerState:
        """Where the trainer is in its life cycle."""
        with self._lock:
            return self._state

    def readiness(self) -> Readiness:
        """Ready while a trainer runs; otherwise says why not."""
        with self._lock:
            state = self._state
            if state is TrainerState.RUNNING:
                w = self._world
                return Readiness(
                    True,
                    f"trainer running (pid {self.pid}, incarnation {self._incarnation}, "
                    f"rank {w.rank} of {w.world_size}, generation {w.generation})",
                )
            if state is TrainerState.EXITED and self._last_exit is not None:
                return Readiness(False, self._last_exit.describe())
            if state is TrainerState.START_FAILED:
                return Readiness(False, f"trainer failed to start: {self._start_error}")
            return Readiness(False, f"trainer {state.value}")

    # -- what the CLI and elastic training drive ---------------------------------------------

    def start(self, world: TrainerWorld | None = None) -> int:
        """Starts a new trainer incarnation (in `world` if given); returns its pid.

        Raises:
            TrainerStartError: a trainer is already running, or the command cannot be executed.
        """
        with self._lock:
            if self._state in (TrainerState.RUNNING, TrainerState.STOPPING):
                raise TrainerStartError("a trainer is already running")
            if world is not None:
                self._world = world
            incarnation = self._next_incarnation
            env = {
                **self._base_env,
                **self._framework.launch_env(self._world),
                names.METRICS_DIR: str(self._metrics_dir),
                names.INCARNATION: str(incarnation),
                names.FLUSH_SECONDS: str(self._flush_seconds),
                names.AGENT_LEASE_FD: str(self._lease_read),
            }
            try:
                proc = self._launcher(self._command, env)
            except OSError as e:
                self._state = TrainerState.START_FAILED
                self._start_error = f"cannot execute {self._command[0]!r}: {e.strerror or e}"
                raise TrainerStartError(self._start_error) from e
            self._proc = proc
            if self._tail is not None and proc.stderr is not None:
                self._tail.follow(proc.stderr)
            self._next_incarnation += 1
            self._incarnation = incarnation
            self._starts += 1
            self._started_at = self._clock()
            self._state = TrainerState.RUNNING
            log.info(
                "trainer incarnation %d started (pid %d, rank %d of %d, generation %d)",
                incarnation,
                proc.pid,
                self._world.rank,
                self._world.world_size,
                self._world.generation,
            )
            return proc.pid

    def wait(self, timeout: float | None = None) -> TrainerExit | None:
        """Waits up to `timeout` s for the trainer to end; returns how it ended, or None."""
        proc = self._proc
        if proc is None:
            return self._last_exit
        try:
            returncode = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self._reaped(proc, returncode)

    def forward_signal(self, sig: int) -> None:
        """Sends `sig` to the trainer's process group (no-op when none runs)."""
        pid = self.pid
        if pid is None:
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, grace_seconds: float | None = None) -> TrainerExit | None:
        """SIGTERM, then SIGKILL after `grace_seconds`; returns how the trainer ended."""
        grace = self._stop_grace if grace_seconds is None else grace_seconds
        with self._lock:
            if self._state is not TrainerState.RUNNING:
                return self._last_exit
            self._state = TrainerState.STOPPING
        self.forward_signal(signal.SIGTERM)
        ended = self.wait(grace)
        if ended is None:
            log.warning("trainer did not stop within %.1f s; killing it", grace)
            self.forward_signal(signal.SIGKILL)
            ended = self.wait(10.0)
        return ended

    def kill(self) -> None:
        """SIGKILL to the trainer's process group, without waiting."""
        self.forward_signal(signal.SIGKILL)

    def restart(self, world: TrainerWorld) -> int:
        """Stops the running trainer (if any) and starts a new incarnation in `world`."""
        self.stop()
        return self.start(world)

    def update_world(self, world: TrainerWorld) -> None:
        """Records a world change the running trainer made in-process (no restart)."""
        with self._lock:
            self._world = world

    def log_tail(self) -> tuple[str, ...]:
        """The last stderr lines of the current (or last) incarnation (none without a tail)."""
        return () if self._tail is None else self._tail.lines()

    def _reaped(self, proc: subprocess.Popen[bytes], returncode: int) -> TrainerExit:
        with self._lock:
            if self._proc is not proc:
                assert self._last_exit is not None
                return self._last_exit
            try:  # stragglers in the trainer's group must not outlive it
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            ended = TrainerExit(
                shell_status(returncode), self._clock() - self._started_at, self._incarnation
            )
            self._proc = None
            self._last_exit = ended
            self._state = TrainerState.EXITED
            log.debug("%s", ended.describe())
            return ended
