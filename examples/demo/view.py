"""What the demo shows while it runs: a live panel on a terminal, plain lines otherwise.

Both views get the same :class:`Status` every tick and the same events (story acts, sizer
decisions, HPA rescales, pods starting and stopping, new worlds); the live view redraws one
panel in place, the plain view prints each event once plus a status line every few seconds.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

from examples.demo.telemetry import Rescale, Training

BAR = 30
TRAINER = "trainer"


@dataclass(frozen=True)
class Sizer:
    """What the sizer said for the job (the adapter's ``/debug/sizing``)."""

    desired: int
    limited_by: str
    message: str


@dataclass(frozen=True)
class PodView:
    """A pod as the frame counts it (from the simulated node or from the API)."""

    app: str
    """``trainer`` for the job's workers, else the other work's name."""
    cpu: int
    bound: bool
    deleting: bool
    priority: int

    @property
    def worker(self) -> bool:
        """One of the job's pods."""
        return self.app == TRAINER


@dataclass(frozen=True)
class ClusterState:
    """The cluster's side of a frame: the Deployment, its pods, the node, the HPA."""

    replicas: int
    """The Deployment's replicas (what the HPA set)."""
    workers: str
    """The workers' states, e.g. "2 running, 1 starting"."""
    slots: str
    """The node's slots, e.g. "[T T S]"."""
    free_slots: int
    trainer_slots: int
    other_slots: int
    pending_priority: int
    """Pending pods of other, higher-priority work (waiting for room)."""
    hpa_read: str
    """What the HPA read at its last sync, e.g. "3"."""
    hpa_desired: int | None


@dataclass(frozen=True)
class Status:
    """Everything one frame shows."""

    t: float
    title: str
    """Where the job runs, e.g. "on a simulated 3-slot node"."""
    headline: str
    act: int
    acts: int
    training: Training
    progress: float
    """0-1: samples trained / samples the job will train."""
    cluster: ClusterState
    sizer: Sizer | None
    last_pause: Rescale | None
    events: Sequence[str]


def cluster_state(
    pods: Sequence[PodView], slots: int, replicas: int, hpa_read: str, hpa_desired: int | None
) -> ClusterState:
    """The frame's cluster side from the pods (terminal ones left out by the caller)."""
    bound = [p for p in pods if p.bound]
    workers = [p for p in pods if p.worker]
    states = {
        "pending": sum(1 for p in workers if not p.bound),
        "running": sum(1 for p in workers if p.bound and not p.deleting),
        "stopping": sum(1 for p in workers if p.deleting),
    }
    free = max(0, slots - sum(p.cpu for p in bound))
    marks = [("t" if p.deleting else "T") if p.worker else p.app[0].upper() for p in bound]
    waiting = [p for p in pods if not p.bound and not p.worker]
    more = f" waiting: {len(waiting)} {waiting[0].app} pod(s)" if waiting else ""
    return ClusterState(
        replicas=replicas,
        workers=", ".join(f"{n} {state}" for state, n in states.items() if n) or "none",
        slots=f"[{' '.join(marks + ['.'] * free)}]{more}",
        free_slots=free,
        trainer_slots=sum(p.cpu for p in bound if p.worker),
        other_slots=sum(p.cpu for p in bound if not p.worker),
        pending_priority=sum(1 for p in waiting if p.priority > 0),
        hpa_read=hpa_read,
        hpa_desired=hpa_desired,
    )


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def progress_bar(fraction: float, width: int = BAR) -> str:
    """``[#####.....]  48 %``."""
    filled = max(0, min(width, round(fraction * width)))
    return f"[{'#' * filled}{'.' * (width - filled)}] {100 * fraction:3.0f} %"


def panel(s: Status) -> list[str]:
    """The live view's lines."""
    t = s.training
    pause = (
        f"{s.last_pause.pause_s:.2f} s ({s.last_pause.before} -> {s.last_pause.after})"
        if s.last_pause is not None and s.last_pause.pause_s is not None
        else "-"
    )
    sizer = (
        f"desired_replicas {s.sizer.desired} ({s.sizer.limited_by}): {s.sizer.message}"
        if s.sizer is not None
        else "(no decision yet)"
    )
    c = s.cluster
    hpa = (
        "(no sync yet)"
        if c.hpa_desired is None
        else f"reads desired_replicas {c.hpa_read} -> sets replicas {c.hpa_desired}"
    )
    lines = [
        f"EDL demo: elastic job ml/digits {s.title}    t = {s.t:6.1f} s",
        f"  story     {s.act}/{s.acts}  {s.headline}",
        f"  slots     {c.slots}  free {c.free_slots}   (T trainer, B batch, S service, . free)",
        f"  sizer     {sizer}",
        f"  HPA       {hpa}",
        f"  workers   {c.workers} (Deployment replicas {c.replicas})",
        f"  world     generation {t.world.generation}, {t.world.members} member(s)"
        + (" (finished)" if t.world.finished else ""),
        f"  training  {_fmt(t.samples_per_second, '6.0f')} samples/s   loss "
        f"{_fmt(t.loss, '.4f')}   last pause {pause}",
        f"  progress  {progress_bar(s.progress)}",
        "  events",
        *[f"    {e}" for e in s.events[-6:]],
    ]
    return lines


def status_line(s: Status) -> str:
    """The plain view's periodic line."""
    t = s.training
    return (
        f"{s.t:6.1f} s  world {t.world.members} (gen {t.world.generation})  replicas "
        f"{s.cluster.replicas}  free slots {s.cluster.free_slots}  "
        f"{_fmt(t.samples_per_second, '.0f')} samples/s  loss {_fmt(t.loss, '.4f')}  "
        f"{100 * s.progress:.0f} %"
    )


class View(Protocol):
    """Where frames and events go."""

    def show(self, status: Status, new_events: Sequence[str]) -> None:
        """One tick."""
        ...

    def close(self) -> None:
        """The run is over (leave the terminal as it was)."""
        ...


class LiveView:
    """Redraws the panel in place (ANSI cursor movement) on a terminal."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._height = 0
        self._out.write("\x1b[?25l")  # hide the cursor while redrawing

    def show(self, status: Status, new_events: Sequence[str]) -> None:
        """Redraw."""
        width = shutil.get_terminal_size((100, 24)).columns
        lines = [line[: width - 1] for line in panel(status)]
        lines += [""] * max(0, self._height - len(lines))
        up = f"\x1b[{self._height}F" if self._height else ""
        self._out.write(up + "".join(f"{line}\x1b[K\n" for line in lines))
        self._out.flush()
        self._height = len(lines)

    def close(self) -> None:
        """Show the cursor again."""
        self._out.write("\x1b[?25h\n")
        self._out.flush()


class PlainView:
    """One line per event, and a status line every ``every_s`` seconds."""

    def __init__(self, out: TextIO, every_s: float = 5.0) -> None:
        self._out = out
        self._every = every_s
        self._next = 0.0

    def show(self, status: Status, new_events: Sequence[str]) -> None:
        """Print what is new."""
        for e in new_events:
            self._out.write(e + "\n")
        if status.t >= self._next:
            self._out.write(status_line(status) + "\n")
            self._next = status.t + self._every
        self._out.flush()

    def close(self) -> None:
        """Nothing to restore."""
