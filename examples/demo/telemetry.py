"""What the job is doing, read the way a user would: the world record and the agents' metrics.

* the **world** (generation, members, finished) from the membership store's record
  (``<store>/<job>/world.json`` on one machine, ConfigMap ``edl-<job>-world`` on Kubernetes,
  docs/elastic.md §2);
* **throughput** from each agent's ``edl_trainer_samples_total`` (per-pod increments, so a pod
  that leaves takes nothing back), **rescale pauses** from each survivor's
  ``edl_trainer_rescale_pause_seconds`` histogram and ``detect`` phase counter (a new count
  is the latest world change, the largest of the survivors' figures is kept);
* the **loss** from the ``step N loss L`` lines rank 0 prints (``--log-every``), in its log
  file as the demo's kubelet writes it or as a kubelet does (CRI format: each line after its
  time, stream and tag).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from examples.demo.probe import scrape

_DETECT = 'edl_trainer_rescale_phase_seconds_total{phase="detect"}'
_LOSS = re.compile(rb"^(?:\S+ (?:stdout|stderr) [FP] )?step (\d+) loss ([0-9.]+)$", re.MULTILINE)


@dataclass(frozen=True)
class World:
    """The agreed world: generation and member count (0 members: not formed or paused)."""

    generation: int = 0
    members: int = 0
    finished: bool = False


@dataclass(frozen=True)
class Rescale:
    """One world change the job went through."""

    t: float
    generation: int
    before: int
    after: int
    pause_s: float | None = None
    """Training stood still this long after the decision, as the survivors measured it (the
    largest), once they reported it."""
    detect_s: float | None = None
    """From the change (a pod joining or leaving) to the decision: the debounce."""
    trained: bool = False
    """The new world trained (a world formed as the job ended may never have)."""


@dataclass(frozen=True)
class Training:
    """The job at one moment."""

    world: World
    samples: float
    """Samples trained so far (all ranks)."""
    samples_per_second: float | None
    steps_in_world: int
    """Steps (of ``global_batch`` samples) trained since the current world formed."""
    loss: float | None
    loss_step: int | None


def parse_world(text: str) -> World:
    """A world record's JSON; an empty world when it is not one (yet, or half-written)."""
    try:
        raw = json.loads(text)
        return World(int(raw["generation"]), len(raw["members"]), bool(raw.get("finished")))
    except (ValueError, KeyError, TypeError):
        return World()


def local_world(store: Path, job: str) -> Callable[[], World]:
    """Reads the local membership store's record (``--membership local:<store>``)."""

    def read() -> World:
        try:
            return parse_world((store / job / "world.json").read_text())
        except OSError:
            return World()

    return read


@dataclass
class _PodCounters:
    samples: float = 0.0
    pause_count: float = 0.0
    pause_sum: float = 0.0
    detect: float = 0.0


@dataclass
class _LogTail:
    offset: int = 0
    partial: bytes = b""


@dataclass
class JobTelemetry:
    """Accumulates what the job did, one :meth:`observe` per tick."""

    read_world: Callable[[], World]
    global_batch: int
    rate_window_s: float = 3.0
    samples: float = 0.0
    world: World = field(default_factory=World)
    changes: list[Rescale] = field(default_factory=list)
    """Every world change seen, the latest possibly not trained in yet."""
    first_size: int = 0
    """The first world's size, once it trained."""
    loss: float | None = None
    loss_step: int | None = None
    _pods: dict[str, _PodCounters] = field(default_factory=dict)
    _logs: dict[Path, _LogTail] = field(default_factory=dict)
    _rate: deque[tuple[float, float]] = field(default_factory=deque)
    _world_start_samples: float = 0.0

    def observe(self, now: float, agents: Mapping[str, tuple[str, int, Path]]) -> Training:
        """One look at the world, every agent (pod -> (host, metrics port, log file)), the logs.

        The world is read first: a generation is written before any trainer re-initialises,
        so a pause an agent reports belongs to the latest world change seen.
        """
        world = self.read_world()
        if world.generation != self.world.generation and world.members:
            if self.world.members and world.members != self.world.members:
                self.changes.append(
                    Rescale(now, world.generation, self.world.members, world.members)
                )
            self._world_start_samples = self.samples
        if world.members or world.finished:
            self.world = world
        for pod, (host, port, log) in agents.items():
            self._scrape(pod, host, port)
            self._read_loss(log)
        for gone in set(self._pods) - set(agents):
            del self._pods[gone]
        if self.samples > self._world_start_samples:  # the current world has trained
            if not self.first_size:
                self.first_size = self.world.members
            if self.changes and not self.changes[-1].trained:
                self.changes[-1] = replace(self.changes[-1], trained=True)
        self._rate.append((now, self.samples))
        while len(self._rate) > 2 and now - self._rate[1][0] >= self.rate_window_s:
            self._rate.popleft()
        (t0, s0) = self._rate[0]
        rate = (self.samples - s0) / (now - t0) if now - t0 >= 0.5 else None
        steps = int((self.samples - self._world_start_samples) // self.global_batch)
        return Training(self.world, self.samples, rate, steps, self.loss, self.loss_step)

    def _scrape(self, pod: str, host: str, port: int) -> None:
        m = scrape(port, host)
        if m is None:
            return
        seen = self._pods.setdefault(pod, _PodCounters())
        samples = m.get("edl_trainer_samples_total")
        if samples is not None:
            # a counter that went down restarted from 0 (a new process): count from there
            self.samples += samples - seen.samples if samples >= seen.samples else samples
            seen.samples = samples
        count = m.get("edl_trainer_rescale_pause_seconds_count")
        total = m.get("edl_trainer_rescale_pause_seconds_sum")
        detect = m.get(_DETECT, 0.0)
        if count is None or total is None:
            return
        if count > seen.pause_count and self.changes:  # this survivor waited through one more
            new = count - seen.pause_count
            pause = (total - seen.pause_sum) / new
            detected = (detect - seen.detect) / new
            r = self.changes[-1]
            self.changes[-1] = replace(
                r,
                pause_s=max(pause, r.pause_s or 0.0),
                detect_s=max(detected, r.detect_s or 0.0),
            )
        seen.pause_count, seen.pause_sum, seen.detect = count, total, detect

    def _read_loss(self, log: Path) -> None:
        tail = self._logs.setdefault(log, _LogTail())
        try:
            with log.open("rb") as f:
                f.seek(tail.offset)
                chunk = f.read()
        except OSError:
            return
        tail.offset += len(chunk)
        text = tail.partial + chunk
        cut = text.rfind(b"\n") + 1
        tail.partial = text[cut:]
        for m in _LOSS.finditer(text[:cut]):
            step = int(m.group(1))
            if self.loss_step is None or step > self.loss_step:
                self.loss_step, self.loss = step, float(m.group(2))

    @property
    def rescales(self) -> list[Rescale]:
        """The world changes the job trained through, each from the last world that trained
        (a world that formed and changed again before its first step is skipped)."""
        out, before = [], self.first_size
        for r in self.changes:
            if r.trained:
                if r.after != before:
                    out.append(replace(r, before=before))
                before = r.after
        return out

    @property
    def sizes(self) -> list[int]:
        """Sizes of the worlds the job trained in, in order."""
        return ([self.first_size] if self.first_size else []) + [r.after for r in self.rescales]

    @property
    def untrained(self) -> list[Rescale]:
        """World changes that trained no step (the job ended, or the world changed again)."""
        return [r for r in self.changes if not r.trained]

    @property
    def last_pause(self) -> Rescale | None:
        """The latest rescale whose pause is known."""
        known = [r for r in self.changes if r.pause_s is not None]
        return known[-1] if known else None
