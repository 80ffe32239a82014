"""MetricWindow: a fixed-capacity ring of (timestamp, value) samples for one series of one pod."""

from __future__ import annotations

from array import array
from typing import NamedTuple


class Point(NamedTuple):
    """A value and the time of the newest sample it rests on (value first, as in `MetricPoint`)."""

    value: float
    timestamp: float


class MetricWindow:
    """The newest ``capacity`` samples of one series, oldest overwritten first.

    Samples live in one ``array('d')`` of interleaved (time, value) pairs (16 bytes a sample),
    so memory per series is fixed.
    Out-of-order or duplicate timestamps are dropped.
    """

    __slots__ = ("_data", "_start", "capacity", "size")

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("a MetricWindow needs room for at least two samples")
        self.capacity = capacity
        self.size = 0
        self._start = 0
        self._data = array("d")

    def add(self, timestamp: float, value: float) -> bool:
        """Append a sample; returns False when it is not newer than the last one."""
        if self.size and timestamp <= self.last_time:
            return False
        if self.size < self.capacity:
            self._data.append(timestamp)
            self._data.append(value)
            self.size += 1
        else:
            self._data[2 * self._start] = timestamp
            self._data[2 * self._start + 1] = value
            self._start = (self._start + 1) % self.capacity
        return True

    @property
    def last_time(self) -> float:
        """Timestamp of the newest sample (``-inf`` when empty)."""
        if not self.size:
            return float("-inf")
        return self._data[2 * ((self._start + self.size - 1) % self.capacity)]

    def latest(self) -> Point | None:
        """The newest sample, or None when empty."""
        if not self.size:
            return None
        i = 2 * ((self._start + self.size - 1) % self.capacity)
        return Point(self._data[i + 1], self._data[i])

    def samples(self) -> list[tuple[float, float]]:
        """All samples as ``(timestamp, value)``, the order of `add`, oldest first."""
        cap, start, data = self.capacity, self._start, self._data
        return [
            (data[2 * ((start + k) % cap)], data[2 * ((start + k) % cap) + 1])
            for k in range(self.size)
        ]

    def rate(self, window_seconds: float) -> Point | None:
        """Per-second increase of a counter over the window ending at the newest sample.

        Like Prometheus ``rate()``, a drop in value is a counter reset (the process restarted):
        the post-reset value counts as the increase since the reset. Unlike it, the result is
        not extrapolated to the window edges: it is the exact average over the sampled span.
        Returns the rate at the newest sample's time, or None with fewer than two samples in
        the window.
        """
        if self.size < 2:
            return None
        cap, start, data = self.capacity, self._start, self._data
        newest = 2 * ((start + self.size - 1) % cap)
        t_last = data[newest]
        horizon = t_last - window_seconds
        increase = 0.0
        t_first = t_last
        prev = data[newest + 1]
        used = 1
        for k in range(self.size - 2, -1, -1):
            i = 2 * ((start + k) % cap)
            t = data[i]
            if t < horizon:
                break
            v = data[i + 1]
            increase += prev - v if prev >= v else prev
            prev = v
            t_first = t
            used += 1
        if used < 2 or t_last <= t_first:
            return None
        return Point(increase / (t_last - t_first), t_last)

    def nbytes(self) -> int:
        """Approximate memory held by this window."""
        return 56 + 64 + 16 * self.capacity
