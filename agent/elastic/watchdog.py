"""Step-progress watchdog: tells a trainer that stands still from one that waits or works.

It is fed observations of the trainer's report (`agent.trainer.reports`), which the trainer's
flusher thread rewrites every flush interval whatever its training loop is doing. So:

- a process in the stopped state (SIGSTOP) for `stall_seconds`, whatever it was doing, or a
  trainer in its training loop whose report has not been rewritten for three times that
  (frozen holding the interpreter lock; outside the loop a framework may hold the lock
  while it forms a group) stands still: it is *frozen*, will never reach a step boundary,
  answer a drain or release its peers' collective, and its agent excludes it;
- a report that is fresh but whose last step is old is a trainer that waits (in a collective,
  on a slow peer, or in a rescale): not its fault, and the pause bounds cover it.

It also knows when training stood still before a decision (`stood_still_since`), which is
where an honest rescale pause starts: a crash or a hung peer stops the steps well before any
agent decides on a new world. Pure: values in, answers out; the supervisor does the reading.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """What one read of the trainer's report said."""

    updated: float
    """Wall time the trainer last rewrote its report."""
    last_step: float | None
    """Wall time its last step ended (None: no step yet in this process)."""
    steps: int
    mean_step: float = 0.0
    """Mean step duration so far (seconds)."""


class StallWatchdog:
    """Judges the current trainer incarnation from its latest `Progress`."""

    def __init__(self, stall_seconds: float, flush_seconds: float) -> None:
        if stall_seconds and stall_seconds <= 3 * flush_seconds:
            raise ValueError(
                f"stall timeout {stall_seconds} s must exceed three report flushes "
                f"({flush_seconds} s each)"
            )
        self.stall_seconds = stall_seconds
        """0 disables the frozen verdict."""
        self._flush = flush_seconds
        self._latest: Progress | None = None
        self._stopped_since: float | None = None

    @property
    def latest(self) -> Progress | None:
        """The newest observation (None before the trainer's first report)."""
        return self._latest

    def reset(self) -> None:
        """A new trainer incarnation: forget the old one's reports."""
        self._latest = None
        self._stopped_since = None

    def observe(self, progress: Progress | None) -> None:
        """Feeds one read (None: no report yet, or unreadable: keeps the previous one)."""
        if progress is not None:
            self._latest = progress

    def observe_state(self, stopped: bool, now: float) -> None:
        """Feeds the process state: stopped (SIGSTOP, SIGTSTP) or not, as seen at `now`."""
        if not stopped:
            self._stopped_since = None
        elif self._stopped_since is None:
            self._stopped_since = now

    def frozen_for(self, now: float, in_training_loop: bool) -> float:
        """Seconds the trainer has stood still, once past its bound; else 0."""
        if not self.stall_seconds:
            return 0.0
        if self._stopped_since is not None and now - self._stopped_since > self.stall_seconds:
            return now - self._stopped_since
        latest = self._latest
        if not in_training_loop or latest is None:
            return 0.0
        age = now - latest.updated
        return age if age > 3 * self.stall_seconds else 0.0

    def stood_still_since(self, decided: float) -> float:
        """When training stopped, as far as a pause is concerned: `decided`, or earlier.

        A trainer still stepping when the decision came (its last step within a couple of
        flushes and two mean steps of it: the report lags by up to one flush, and a step in
        flight still counts) paused at the decision; one whose steps had stopped before it
        paused at its last step.
        """
        latest = self._latest
        if latest is None or latest.last_step is None:
            return decided
        if decided - latest.last_step > 2 * self._flush + 2 * latest.mean_step + 0.5:
            return latest.last_step
        return decided
