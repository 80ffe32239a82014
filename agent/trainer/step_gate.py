"""A step gate for tests and demos: the job trains no step past what a file allows.

A test that fires events at a training job (joins, kills, scale-downs) must not depend on the
job outlasting them: on a loaded machine a rescale can take long enough for the job to finish
before the test's next event. With a gate, the test writes the highest global step the job may
*start* next into a file; at a step boundary past it every rank waits (still answering
rescales, so the job changes worlds while it waits) until the file allows more. The gate
takes no step of its own, so the sample ledger's exactly-once accounting is unchanged.

Off unless a script passes one to `ElasticTrainer.steps(gate=...)` (the elastic examples'
`--step-gate PATH`) or waits on it itself (`StepGate.wait`: the fixed-world examples).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

UNLIMITED = 2**62
"""What an `allow_all` gate file holds: more steps than any job has."""


class StepGateError(ValueError):
    """The gate file holds something other than a step number."""


@dataclass(frozen=True)
class StepGate:
    """The file that says how far the job may train; a missing file allows no step."""

    path: Path
    poll_seconds: float = 0.1
    """How often a waiting rank reads the file again."""
    max_wait_seconds: float = 1800.0
    """A bound on one wait: after it the gate opens (and says so in the log)."""

    def allowed(self) -> int:
        """The number of global steps the job may have taken before it waits (0: none)."""
        try:
            raw = self.path.read_text().strip()
        except FileNotFoundError:
            return 0
        try:
            return int(raw)
        except ValueError as e:
            raise StepGateError(f"step gate {self.path}: not a step number: {raw!r}") from e

    def wait(self, steps_done: int) -> bool:
        """Waits until the gate allows a step after `steps_done`; False when it ran out.

        After `max_wait_seconds` the caller goes on (and should say so). For a fixed world:
        its ranks step in lockstep (each step's all-reduce), so every rank waits at the same
        step (one that read the file just before it opened waits a poll in the all-reduce).
        """
        deadline = time.monotonic() + self.max_wait_seconds
        for _ in range(int(self.max_wait_seconds / self.poll_seconds) + 2):
            if steps_done < self.allowed():
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(self.poll_seconds)
        return False

    def allow(self, steps: int) -> None:
        """Lets the job train until `steps` global steps are done (atomic for readers)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{steps}\n")
        tmp.replace(self.path)

    def allow_all(self) -> None:
        """Opens the gate for good (the job then trains to its end)."""
        self.allow(UNLIMITED)
