"""Per-step recording inside the training process: plain Python arithmetic, nothing else.

The hot path (`record_step`, `end_step`, `record_comm`) only adds to attributes and bumps one
histogram bucket found with `bisect`, so it costs well under the 2 µs budget per step and
holds no lock. A background flusher (`agent.trainer.flushing`) copies a `RecorderSnapshot` out of
the recorder a few times a second; only the training thread writes, so every counter the flusher
sees is monotonic, and a snapshot can be at most one step out of step between fields.
"""

from __future__ import annotations

import re
import sys
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

STEP_DURATION_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Upper bounds (seconds) of `edl_trainer_step_duration_seconds`; `+Inf` is implied."""

MAX_SCALARS = 16
"""Distinct scalar names one trainer may record (`edl_trainer_scalar{name}` stays bounded)."""
SCALAR_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")
"""What a scalar's name may be: a Prometheus label value that reads as an identifier."""


@dataclass(frozen=True)
class RecorderSnapshot:
    """Everything a recorder has counted so far, copied at one moment."""

    steps: int
    samples: int
    step_seconds_sum: float
    step_bucket_bounds: tuple[float, ...]
    step_bucket_counts: tuple[int, ...]
    """Per-bucket (not cumulative) counts; one more than the bounds, the last is `+Inf`."""
    comm_seconds: float
    comm_bytes: int
    comm_calls: int
    last_step_unix: float | None
    """Wall-clock time the last step ended, or None before the first step."""
    progress: float | None = None
    """The job's share trained, 0-1, as of the last step (None: the script has no planned
    total: `StepRecorder.progress`)."""
    global_step: int | None = None
    """The job's global step after the last step (None: not an elastic trainer)."""
    scalars: tuple[tuple[str, float], ...] = ()
    """The last value of each user scalar (`StepRecorder.scalar`), by name."""


class _StepTimer:
    """Reusable `with` block that times one step; allocated once per recorder."""

    __slots__ = ("_recorder", "samples")

    def __init__(self, recorder: StepRecorder) -> None:
        self._recorder = recorder
        self.samples = 0

    def __enter__(self) -> _StepTimer:
        self._recorder.begin_step()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._recorder.end_step(self.samples)


class _CommTimer:
    """Reusable `with` block that times one communication call."""

    __slots__ = ("_recorder", "nbytes", "t0")

    def __init__(self, recorder: StepRecorder) -> None:
        self._recorder = recorder
        self.nbytes = 0
        self.t0 = 0.0

    def __enter__(self) -> _CommTimer:
        self.t0 = self._recorder.clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._recorder.record_comm(self._recorder.clock() - self.t0, self.nbytes)


class StepRecorder:
    """Counts steps, samples, step time and communication of one trainer incarnation.

    Not thread-safe for writers: call it from the training loop only. Readers on other
    threads use `snapshot()`.
    """

    __slots__ = (
        "_bounds",
        "_comm_timer",
        "_counts",
        "_last_step_mono",
        "_refused",
        "_scalars",
        "_step_started",
        "_step_timer",
        "_wall",
        "clock",
        "comm_bytes",
        "comm_calls",
        "comm_seconds",
        "global_step",
        "progress",
        "samples",
        "step_seconds_sum",
        "steps",
    )

    def __init__(
        self,
        bounds: Sequence[float] = STEP_DURATION_BUCKETS,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("histogram bounds must be non-empty, strictly increasing")
        self._bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self._bounds) + 1)
        self.clock = clock
        self._wall = wall
        self.steps = 0
        self.samples = 0
        self.step_seconds_sum = 0.0
        self.comm_seconds = 0.0
        self.comm_bytes = 0
        self.comm_calls = 0
        self._step_started = 0.0
        self._last_step_mono: float | None = None
        self._step_timer = _StepTimer(self)
        self._comm_timer = _CommTimer(self)
        self._scalars: dict[str, float] = {}
        self._refused = False
        self.progress: float | None = None
        """The job's share trained, 0-1 (`ElasticTrainer.epochs` sets it after each step; a
        script with its own planned total may set it): ``edl_job_progress_ratio``."""
        self.global_step: int | None = None
        """The job's global step (`ElasticTrainer` sets it after each step)."""

    def record_step(self, samples: int, seconds: float) -> None:
        """Counts one finished step of `samples` samples that took `seconds` of wall time."""
        self._last_step_mono = self.clock()
        self.steps += 1
        self.samples += samples
        self.step_seconds_sum += seconds
        self._counts[bisect_left(self._bounds, seconds)] += 1

    def begin_step(self) -> None:
        """Marks the start of a step; `end_step` measures from here."""
        self._step_started = self.clock()

    def end_step(self, samples: int) -> float:
        """Ends the step begun by `begin_step`, records it, and returns its duration."""
        now = self.clock()
        seconds = now - self._step_started
        self._last_step_mono = now
        self.steps += 1
        self.samples += samples
        self.step_seconds_sum += seconds
        self._counts[bisect_left(self._bounds, seconds)] += 1
        return seconds

    def step(self, samples: int) -> _StepTimer:
        """`with recorder.step(samples=n): ...` times the block as one step (reused object)."""
        timer = self._step_timer
        timer.samples = samples
        return timer

    def record_comm(self, seconds: float, nbytes: int) -> None:
        """Counts one communication call (all-reduce) of `nbytes` payload taking `seconds`."""
        self.comm_seconds += seconds
        self.comm_bytes += nbytes
        self.comm_calls += 1

    def comm(self, nbytes: int) -> _CommTimer:
        """`with recorder.comm(nbytes): all_reduce(...)` times the block as communication."""
        timer = self._comm_timer
        timer.nbytes = nbytes
        return timer

    def scalar(self, name: str, value: float) -> None:
        """Records the latest `value` of a scalar of the script's (``"loss"``, ``"accuracy"``).

        The agent exports it as ``edl_trainer_scalar{name="loss"}``. At most `MAX_SCALARS`
        names: later new names are ignored (one warning), so the series stay few.

        Raises:
            ValueError: `name` is not an identifier of at most 64 characters.
        """
        scalars = self._scalars
        if name not in scalars:
            if not SCALAR_NAME.match(name):
                raise ValueError(f"scalar name {name!r}: expected an identifier of <= 64 chars")
            if len(scalars) >= MAX_SCALARS:
                if not self._refused:
                    print(
                        f"edl: scalar {name!r} ignored: at most {MAX_SCALARS} scalar names",
                        file=sys.stderr,
                    )
                    self._refused = True
                return
        scalars[name] = float(value)

    def snapshot(self) -> RecorderSnapshot:
        """Copies the counters; safe to call from another thread while training runs."""
        counts = tuple(self._counts)  # one C-level copy: consistent within the histogram
        last = self._last_step_mono
        last_unix = None if last is None else self._wall() - (self.clock() - last)
        return RecorderSnapshot(
            steps=self.steps,
            samples=self.samples,
            step_seconds_sum=self.step_seconds_sum,
            step_bucket_bounds=self._bounds,
            step_bucket_counts=counts,
            comm_seconds=self.comm_seconds,
            comm_bytes=self.comm_bytes,
            comm_calls=self.comm_calls,
            last_step_unix=last_unix,
            progress=self.progress,
            global_step=self.global_step,
            scalars=tuple(self._scalars.copy().items()),
        )
