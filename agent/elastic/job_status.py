"""One status of the job, where users read it: annotations of its world ConfigMap.

A condition-like summary (phase, world size and generation, global step, progress, ETA, the
last rescale and why) that answers "how far along is this job, and is it well" in one
``kubectl get``. It lives on the job's world ConfigMap, the one object the trainers may
write (least privilege: no write access to their Deployment), as annotations under
``edl.paddlepaddle.org/`` plus the label ``edl.paddlepaddle.org/phase`` (for ``-L``)::

    kubectl get cm -l edl.paddlepaddle.org/job -L edl.paddlepaddle.org/phase
    kubectl get cm edl-digits-world -o custom-columns=...   # the columns: docs/agent.md

Rank 0's agent writes it (`StatusReporter`) every `REPORT_SECONDS` and at once when the phase
changes; the agent that marks the job finished or failed writes the last one. `job_phase`
and `JobStatus.fields` are pure; the store writes the fields (`MembershipStore.write_status`).
"""

from __future__ import annotations

import datetime as dt
import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.elastic.world import World

PREFIX = "edl.paddlepaddle.org/"
PHASE_KEY = PREFIX + "phase"
"""The label (and annotation) with the job's phase."""
REPORT_SECONDS = 10.0
"""How often rank 0's agent rewrites the status while nothing but the figures changes."""


class JobPhase(enum.Enum):
    """Where the job is, as a user asks it (PyTorchJob's conditions, in one word)."""

    PENDING = "Pending"
    """No world trains yet: starting, below `--min` members, or not formed."""
    RUNNING = "Running"
    """The world trains."""
    RESCALING = "Rescaling"
    """The world is changing: a trainer drains, regroups or forms the next generation."""
    SUCCEEDED = "Succeeded"
    """Finished: a trainer exited 0."""
    FAILED = "Failed"
    """Its trainer failures exceeded the budget (`agent.elastic.failures`)."""


TERMINAL = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED})
"""The phases a job never leaves."""


def job_phase(world: World | None, member_phase: str, stepping: bool) -> JobPhase:
    """The job's phase from the world record and one member's (rank 0's) own phase.

    `member_phase` is `agent.elastic.phases.Phase`'s value; `stepping`: its trainer stepped
    in the current world.
    """
    if world is not None and world.failed:
        return JobPhase.FAILED
    if world is not None and world.finished:
        return JobPhase.SUCCEEDED
    if world is None or world.paused:
        return JobPhase.PENDING
    if member_phase in ("draining", "regrouping", "forming"):
        return JobPhase.RESCALING
    if member_phase == "running":
        return JobPhase.RUNNING if stepping else JobPhase.RESCALING
    return JobPhase.PENDING


def duration_text(seconds: float) -> str:
    """Kubernetes' way of writing a duration (``1h2m3s``, ``45s``)."""
    whole = max(0, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "")
    return f"{text}{secs}s"


def _utc(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class JobStatus:
    """The job's summary at one moment."""

    phase: JobPhase
    world_size: int
    generation: int
    global_step: int | None = None
    progress: float | None = None
    """0-1; None without a planned total."""
    eta_seconds: float | None = None
    last_rescale: str = ""
    """When and to which generation, e.g. ``2026-12-06T15:04:05Z generation 4``."""
    last_rescale_reason: str = ""
    """Why: the rescale record's reasons (``b joined``, ``a left``...)."""
    failures: int = 0
    """Trainer failures the budget currently counts."""

    def fields(self, now: float) -> dict[str, str]:
        """The annotations (``edl.paddlepaddle.org/<key>``) that say it; unknowns are ``-``."""
        progress = "-" if self.progress is None else f"{100 * self.progress:.1f}%"
        eta = "-" if self.eta_seconds is None else duration_text(self.eta_seconds)
        return {
            PHASE_KEY: self.phase.value,
            PREFIX + "world-size": str(self.world_size),
            PREFIX + "generation": str(self.generation),
            PREFIX + "global-step": "-" if self.global_step is None else str(self.global_step),
            PREFIX + "progress": progress,
            PREFIX + "eta": eta,
            PREFIX + "last-rescale": self.last_rescale or "-",
            PREFIX + "last-rescale-reason": self.last_rescale_reason or "-",
            PREFIX + "failures": str(self.failures),
            PREFIX + "status-updated": _utc(now),
        }


STATUS_KEYS = frozenset(JobStatus(JobPhase.PENDING, 0, 0).fields(0.0))
"""Every annotation the status writes (the store keeps them across world writes)."""


def ended_status(kept: Mapping[str, str], phase: JobPhase, step: int | None) -> dict[str, str]:
    """The status annotations a world write that ends the job (`phase`, terminal) carries.

    The kept status is the running job's last report. Its ETA and, for a job that finished,
    its progress and step are no longer true, and the writer that reports the end may come a
    moment later (or, its pod gone, not at all): say what the end makes known (``0s``, the
    finished step) and ``-`` for what only that report knows, never an old figure beside
    ``Succeeded``. A status already terminal is that last report: it stays.
    """
    if not kept:  # nothing was reported: nothing to correct
        return {}
    if kept.get(PHASE_KEY) in {p.value for p in TERMINAL}:
        return {**kept, PHASE_KEY: phase.value}
    if phase is JobPhase.FAILED:  # how far it got stays true; it will not finish
        return {**kept, PHASE_KEY: phase.value, PREFIX + "eta": "-"}
    return {
        **kept,
        PHASE_KEY: phase.value,
        PREFIX + "eta": duration_text(0),
        PREFIX + "progress": "-",
        PREFIX + "global-step": "-" if step is None else str(step),
    }


def rescale_text(at: float, generation: int) -> str:
    """`JobStatus.last_rescale` of a rescale that ended at `at` in `generation`."""
    return f"{_utc(at)} generation {generation}"


class StatusReporter:
    """Writes the status when due: the phase changed, or `interval` passed since the last."""

    def __init__(
        self,
        write: Callable[[Mapping[str, str]], bool],
        interval: float = REPORT_SECONDS,
    ) -> None:
        self._write = write
        self._interval = interval
        self._last: tuple[float, JobPhase] | None = None

    def due(self, phase: JobPhase, now: float) -> bool:
        """The phase changed since the last write, or `interval` passed (`now` monotonic).

        A job over (Succeeded, Failed) is written once: its idle pods rewrite nothing.
        """
        last = self._last
        if last is None or last[1] is not phase:
            return True
        return phase not in TERMINAL and now - last[0] >= self._interval

    def report(self, status: JobStatus, now: float, wall: float) -> bool:
        """Writes `status` if due (`now` monotonic, `wall` Unix); True when written."""
        if not self.due(status.phase, now):
            return False
        if not self._write(status.fields(wall)):
            return False  # a conflicting write (a new world): the next round tries again
        self._last = (now, status.phase)
        return True
