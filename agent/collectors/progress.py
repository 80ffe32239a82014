"""How far along the job is and when it will be done: the ratio the trainer reports, an ETA.

The trainer reports the job's share trained after each step (`StepRecorder.progress`; the
elastic trainer's sampler knows it: samples trained over every planned epoch's). The ETA is
what is left over the rate of progress in a sliding window of those reports: the world's
current speed, so a rescale shows in it within one window, and a pause (a rescale, a
regroup) slows it while it lasts. Pure: the caller passes the times.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

ETA_WINDOW_SECONDS = 120.0
"""How much progress history the rate is taken over."""
MIN_SPAN_SECONDS = 1.0
"""The rate needs points at least this far apart."""


@dataclass(frozen=True)
class ProgressPoint:
    """The job's share trained, 0-1, as of `at` (Unix seconds: the end of the step)."""

    at: float
    ratio: float


class EtaEstimator:
    """Seconds left, from the progress points seen in the last `window` seconds."""

    def __init__(self, window: float = ETA_WINDOW_SECONDS) -> None:
        self._window = window
        self._points: deque[ProgressPoint] = deque()

    def observe(self, point: ProgressPoint) -> None:
        """Adds a point.

        A repeated or older one changes nothing; progress going back (a restore from an older
        checkpoint) starts the history afresh.
        """
        points = self._points
        if points and point.at <= points[-1].at:
            return
        if points and point.ratio < points[-1].ratio:
            points.clear()
        points.append(point)
        while points[0].at < point.at - self._window:
            points.popleft()

    def eta(self) -> float | None:
        """Seconds until the ratio reaches 1 at the window's rate; 0 when done; None unknown."""
        if not self._points:
            return None
        first, last = self._points[0], self._points[-1]
        if last.ratio >= 1.0:
            return 0.0
        span = last.at - first.at
        if span < MIN_SPAN_SECONDS or last.ratio <= first.ratio:
            return None
        rate = (last.ratio - first.ratio) / span
        return (1.0 - last.ratio) / rate
