"""The job's failure budget: trainer crashes counted across every member, in the world record.

A Deployment restarts a crashed container for ever; a job whose script always fails would hold
its hardware for ever too. So each agent whose trainer crashes (an exit that is neither the
job's end, 0, nor a rescale, 75/76) appends a `TrainerFailure` to the job's world record, by
compare-and-swap, whatever its member or incarnation: the record is the one place every pod,
and every restart of a pod, sees. `FailurePolicy.failed` decides, purely, when the failures
within the window exceed the budget: the record is then marked *failed* (a finished world
whose outcome is failure), and every agent treats the job as finished (no trainer; with
``--on-finished scale-to-zero`` the Deployment goes to 0 with a ``JobFailed`` Event that names
the last failures' statuses and log lines).

Nothing here reads a clock or a file: the agent passes the time and the log tail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.elastic.errors import WorldRecordInvalid
from agent.elastic.option_table import DEFAULTS

TAIL_LINES = 3
"""Lines of a failed trainer's stderr kept per failure (its last ones: the error itself)."""
TAIL_LINE_CHARS = 200
"""A kept line is cut to this many characters (the record is one ConfigMap key)."""
KEPT_FAILURES = 10
"""The record keeps at most this many failures (the newest), whatever the budget."""
EVENT_MESSAGE_CHARS = 1000
"""An Event's message is cut here (events.k8s.io keeps 1 kB of a note)."""


@dataclass(frozen=True)
class TrainerFailure:
    """One crash of one member's trainer, as the world record keeps it."""

    member: str
    """The member id (the pod name on Kubernetes)."""
    status: int
    """The trainer's exit status (128+N: killed by signal N)."""
    at: float
    """Wall time (Unix seconds) the agent saw the exit."""
    tail: tuple[str, ...] = ()
    """The last lines the trainer wrote to stderr (at most `TAIL_LINES`, each cut)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as stored in the world record."""
        tail = list(self.tail)
        return {"member": self.member, "status": self.status, "at": self.at, "tail": tail}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrainerFailure:
        """Parse one failure; raise `WorldRecordInvalid` on anything odd."""
        try:
            status, at, tail = raw["status"], float(raw["at"]), raw.get("tail", [])
            member = str(raw["member"])
        except (KeyError, TypeError, ValueError) as e:
            raise WorldRecordInvalid(f"bad failure {raw!r}: {e}") from e
        if not isinstance(status, int) or isinstance(status, bool) or not isinstance(tail, list):
            raise WorldRecordInvalid(f"bad failure {raw!r}")
        return cls(member, status, at, tuple(str(line) for line in tail))

    def describe(self, whole_tail: bool = False) -> str:
        """One line: who, how, and the last line it wrote (`whole_tail`: its kept lines)."""
        lines = self.tail if whole_tail else self.tail[-1:]
        return f"{self.member} status {self.status}: {' | '.join(lines) or 'no output'}"


def kept_tail(lines: Iterable[str]) -> tuple[str, ...]:
    """The last non-blank lines of a log tail, cut to what the record keeps."""
    kept = [line.rstrip()[:TAIL_LINE_CHARS] for line in lines if line.strip()]
    return tuple(kept[-TAIL_LINES:])


@dataclass(frozen=True)
class FailurePolicy:
    """How many trainer failures, within how long, a job takes before it is failed.

    From ``--failure-budget`` / ``EDL_FAILURE_BUDGET`` and ``--failure-window`` /
    ``EDL_FAILURE_WINDOW`` (`agent.elastic.option_table`).
    """

    budget: int = DEFAULTS["failure_budget"]
    """Failures the job survives within `window`; one more fails it. 0: no budget (failures
    are only logged and counted, the job is never failed for them)."""
    window: float = DEFAULTS["failure_window"]
    """Seconds a failure counts against the budget."""

    @property
    def enabled(self) -> bool:
        """A budget is set."""
        return self.budget > 0

    def recent(self, failures: Sequence[TrainerFailure], now: float) -> list[TrainerFailure]:
        """The failures within the window before `now`, oldest first."""
        return [f for f in failures if now - f.at <= self.window]

    def failed(self, failures: Sequence[TrainerFailure], now: float) -> bool:
        """More failures within the window than the budget allows."""
        return self.enabled and len(self.recent(failures, now)) > self.budget

    def kept(self, failures: Sequence[TrainerFailure], now: float) -> tuple[TrainerFailure, ...]:
        """What the record keeps: the window's failures, the newest `KEPT_FAILURES`.

        More when the budget is larger, so that every failure it counts is kept.
        """
        return tuple(self.recent(failures, now)[-max(KEPT_FAILURES, self.budget + 1) :])


def failed_message(job: str, failures: Sequence[TrainerFailure]) -> str:
    """The ``JobFailed`` Event's message: how many failures, then the last ones, newest first.

    The newest with the lines of its log tail (where it failed, then why), the others with
    their last line.
    """
    head = f"job {job} failed after {len(failures)} trainer failures over its budget; last: "
    newest_first = list(reversed(failures))
    parts = [f.describe(whole_tail=i == 0) for i, f in enumerate(newest_first)]
    message = head + "; ".join(parts)
    if len(message) <= EVENT_MESSAGE_CHARS:
        return message
    return message[: EVENT_MESSAGE_CHARS - 3] + "..."
