"""Child processes with a log file each, stopped by their own process-group id."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from tests.support.net import free_port as free_port


class HarnessError(RuntimeError):
    """The harness could not bring a component up (its log tail is in the message)."""


def run_build(script: Path, lock_name: str, what: str, timeout_s: float) -> str:
    """Runs a cached build script (instant when cached) under a lock file of EDL's cache, one
    build at a time on the machine; returns its stdout (the last line names what it built).

    Raises:
        HarnessError: it failed or ran past `timeout_s`; the message holds its last lines.
    """
    cache = Path(os.environ.get("EDL_CACHE_DIR", Path.home() / ".cache" / "edl"))
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / lock_name).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            done = subprocess.run(
                ["bash", str(script)], capture_output=True, text=True, timeout=timeout_s,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            raise HarnessError(f"{what} ran past {timeout_s:.0f} s") from e
    if done.returncode != 0:
        out = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        raise HarnessError(f"{what} failed (rc={done.returncode}):\n{out}")
    return done.stdout


def built_folder(
    script: Path, lock_name: str, what: str, timeout_s: float, executables: tuple[str, ...]
) -> Path:
    """`run_build`, then the folder its last line names, once every one of `executables`
    (paths relative to that folder) is there and executable.

    Raises:
        HarnessError: the build failed, or it reported a folder without one of them.
    """
    out = run_build(script, lock_name, what, timeout_s)
    folder = Path(out.strip().splitlines()[-1])
    for name in executables:
        if not os.access(folder / name, os.X_OK):
            raise HarnessError(f"build.sh reported {folder} but {name} is missing there")
    return folder


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file ('' if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


class ManagedProcess:
    """One child process in its own session, its stdout+stderr in `log`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        if self.alive():
            raise HarnessError(f"{self.name} is already running")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("ab")
        self._log_file.write(f"=== {time.strftime('%H:%M:%S')} start: {self.argv}\n".encode())
        self._log_file.flush()
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`; idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait(timeout=10)
        self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, sig)  # the group we created with start_new_session
        except ProcessLookupError:
            pass

    def tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)

    def describe_failure(self, what: str, lines: int = 60) -> str:
        rc = self.returncode()
        state = "running" if rc is None and self._proc else f"exited rc={rc}"
        return f"{self.name} {what} ({state}); log {self.log}, last lines:\n{self.tail(lines)}"
