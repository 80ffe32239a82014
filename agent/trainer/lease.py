"""The trainer's lease on its agent: a trainer dies with its agent, so a job never runs twice.

The agent keeps the write end of a pipe and hands the trainer the read end (its number in
``EDL_AGENT_LEASE_FD``). Nothing is ever written to it: when the agent process ends, however
it ends (SIGKILL included), the kernel closes the write end, the trainer's blocked read
returns end-of-file at once, and the watcher stops the trainer's whole process group (the
agent starts every trainer in its own session). An orphan therefore never keeps training a
generation the fresh agents no longer know about, and an in-process trainer waiting for its
next world does not wait out its timeout first. It works through a wrapper shell too (the
descriptor is inherited), and costs one sleeping thread.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping

from agent.protocol import env as names


def stop_process_group() -> None:
    """What an orphaned trainer does: one line on stderr, then SIGKILL to its process group."""
    print("edl: the agent is gone; stopping this trainer", file=sys.stderr, flush=True)
    os.killpg(os.getpgrp(), signal.SIGKILL)


class AgentLease:
    """Watches the read end of the agent's pipe on a daemon thread."""

    def __init__(self, fd: int, on_lost: Callable[[], None] = stop_process_group) -> None:
        self._fd = fd
        self._on_lost = on_lost
        self._lost = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="edl-agent-lease", daemon=True)

    @property
    def alive(self) -> bool:
        """False once the agent is gone."""
        return not self._lost.is_set()

    def start(self) -> AgentLease:
        """Starts watching; returns self."""
        self._thread.start()
        return self

    def _watch(self) -> None:
        try:
            while os.read(self._fd, 64):
                pass  # the agent never writes; anything read is ignored
        except OSError:
            pass
        self._lost.set()
        self._on_lost()


def watch_agent(env: Mapping[str, str]) -> AgentLease | None:
    """A started lease on the agent that handed one (``EDL_AGENT_LEASE_FD``), else None."""
    raw = env.get(names.AGENT_LEASE_FD, "").strip()
    if not raw.isdigit():
        return None
    try:
        os.fstat(int(raw))
    except OSError:
        return None  # not inherited (a grandchild that closed it): nothing to watch
    return AgentLease(int(raw)).start()
