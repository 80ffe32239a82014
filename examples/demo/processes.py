"""The demo's child processes, and the guarantee that none outlives it.

Every child (the adapter, each agent) starts in its own session, so a Ctrl-C in the terminal
reaches only the demo, which then stops them in order: agents first (SIGTERM: they leave at
a step boundary), then the adapter. Two nets catch what that misses:

* the demo makes itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a trainer
  whose agent died is re-parented to the demo instead of init, so :meth:`ProcessGroup.close`
  still sees (and ends) every descendant;
* every child gets ``PR_SET_PDEATHSIG`` = SIGTERM: if the demo itself is killed (SIGKILL, no
  clean-up possible), the kernel tells its children to stop.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)


def _die_with_parent() -> None:
    """Runs in the child between fork and exec."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ProcessGroup:
    """Starts the demo's children and ends every descendant on :meth:`close`."""

    def __init__(self) -> None:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        self._children: list[subprocess.Popen[bytes]] = []
        self.hurry = False
        """Set (e.g. by a second Ctrl-C) to cut every wait short."""

    def spawn(
        self, argv: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path
    ) -> subprocess.Popen[bytes]:
        """Starts ``argv`` with stdout and stderr appended to ``log``."""
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # safe: the demo runs no threads
            )
        self._children.append(proc)
        return proc

    def reap(self) -> None:
        """Collects exited orphans re-parented to the demo (no zombies pile up)."""
        mine = {p.pid for p in self._children}
        for child in psutil.Process().children():
            try:
                if child.pid not in mine and child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)
            except (psutil.NoSuchProcess, ChildProcessError):
                pass

    def terminate(self, procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
        """SIGTERM ``procs``, wait up to ``grace_s`` for all (less once :attr:`hurry` is set),
        then SIGKILL what is left."""
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not self.hurry:
            if all(p.poll() is not None for p in procs):
                return
            time.sleep(0.1)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def close(self, grace_s: float = 20.0) -> None:
        """Ends every descendant: the children in order, then any orphan left (SIGTERM, 3 s,
        SIGKILL)."""
        self.terminate(self._children, grace_s)
        left = psutil.Process().children(recursive=True)
        for p in left:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(left, timeout=3.0)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=3.0)
        self.reap()
