"""Sizing Events sent from a queue, so a round never waits on kube-apiserver for them.

A round of 1,000 jobs can decide hundreds of changes at once (the first round after a start,
a node lost); each is an Event created through the API. Created in the round, they held
the round (and its lock) for a round trip each. `QueuedEventRecorder` takes them in the
round and sends them from its own thread, oldest first; a full queue (the API server
unreachable for long) drops the newest and counts it, as client-go's event broadcaster
does: an Event is a courtesy to the reader of ``kubectl describe``, the plan is what the
HPA acts on, and the next decision that differs makes a new one.
"""

from __future__ import annotations

import logging
import queue
import threading

from prometheus_client import CollectorRegistry, Counter

from edl_sizing.events import EventRecorder, JobEvent

log = logging.getLogger(__name__)

CAPACITY = 1000
"""Events waiting at most (client-go's broadcaster queues 1,000 too)."""


class QueuedEventRecorder:
    """An `EventRecorder` that hands events to ``inner`` from a thread of its own."""

    def __init__(
        self, inner: EventRecorder, registry: CollectorRegistry, capacity: int = CAPACITY
    ) -> None:
        self._inner = inner
        self._queue: queue.Queue[JobEvent | None] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self.dropped = Counter(
            "edl_adapter_sizing_events_dropped",
            "Sizing Events not sent because the queue was full (kube-apiserver too slow or away).",
            registry=registry,
        )

    def record(self, event: JobEvent) -> None:
        """Queue it (never blocks; a full queue drops it and counts that)."""
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped.inc()
            log.warning("sizing event queue full: dropped %s %s", event.reason, event.name)

    def start(self) -> None:
        """Start sending."""
        self._thread = threading.Thread(target=self._run, name="sizing-events", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is queued within ``timeout_s``, then stop."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._inner.record(event)
            except Exception:  # a recorder never raises; one that does must not end the thread
                log.exception("sending sizing event %s failed", event.name)
