"""Agent-side record of world changes (rescales), for the elastic machinery to fill in.

The exporter publishes it from the start, with zeros, so dashboards and alerts see the series
before the first rescale ("export a default value for series you know may exist").
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass

RESCALE_PHASES: tuple[str, ...] = ("detect", "drain", "rendezvous", "init", "restore")
"""Phases of one rescale, in order; `edl_trainer_rescale_phase_seconds_total{phase}`."""

RESCALE_PAUSE_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Upper bounds (seconds) of `edl_trainer_rescale_pause_seconds`; `+Inf` is implied."""


@dataclass(frozen=True)
class RescaleSnapshot:
    """Rescale figures at one moment."""

    rescales: int
    pause_bucket_bounds: tuple[float, ...]
    pause_bucket_counts: tuple[int, ...]
    pause_seconds_sum: float
    phase_seconds: dict[str, float]


class RescaleLog:
    """Counts rescales, their pause (decision to first step at the new size) and phase times."""

    def __init__(self, bounds: tuple[float, ...] = RESCALE_PAUSE_BUCKETS) -> None:
        self._lock = threading.Lock()
        self._bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._rescales = 0
        self._phases = dict.fromkeys(RESCALE_PHASES, 0.0)

    def record(self, pause_seconds: float, phases: Mapping[str, float]) -> None:
        """Counts one finished rescale.

        Args:
            pause_seconds: from the decision to rescale to the first step at the new size.
            phases: seconds spent per phase; names outside `RESCALE_PHASES` are refused.
        """
        unknown = set(phases) - set(RESCALE_PHASES)
        if unknown:
            raise ValueError(f"unknown rescale phases: {sorted(unknown)}")
        with self._lock:
            self._rescales += 1
            self._sum += pause_seconds
            self._counts[bisect_left(self._bounds, pause_seconds)] += 1
            for name, seconds in phases.items():
                self._phases[name] += seconds

    def snapshot(self) -> RescaleSnapshot:
        """Copies the figures under the lock."""
        with self._lock:
            return RescaleSnapshot(
                self._rescales, self._bounds, tuple(self._counts), self._sum, dict(self._phases)
            )
