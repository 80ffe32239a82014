"""Sizing Events from a queue: a round hands them over and goes on, whatever kube-apiserver does."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from edl_sizing.events import JobEvent
from metrics_adapter.sizing.event_queue import QueuedEventRecorder
from tests.support.waiting import wait_for

pytestmark = pytest.mark.unit


class SlowApi:
    """An Event recorder that blocks until released (kube-apiserver away or slow)."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.sent: list[str] = []

    def record(self, event: JobEvent) -> None:
        self.released.wait(30)
        self.sent.append(event.deployment)


def event(i: int) -> JobEvent:
    return JobEvent("ml", f"job-{i}", "SizingGrow", f"grew to {i}", desired=i)


def test_a_round_hands_its_events_over_without_waiting_and_they_go_out_in_order() -> None:
    api = SlowApi()
    queued = QueuedEventRecorder(api, CollectorRegistry())
    queued.start()
    try:
        for i in range(50):
            queued.record(event(i))  # returns although the API answers nothing yet
        assert api.sent == []
        api.released.set()
        wait_for(lambda: len(api.sent) == 50, timeout_s=30, what="every event sent")
        assert api.sent == [f"job-{i}" for i in range(50)]
    finally:
        api.released.set()
        queued.stop()


def test_a_full_queue_drops_the_newest_and_counts_them() -> None:
    api = SlowApi()
    registry = CollectorRegistry()
    queued = QueuedEventRecorder(api, registry, capacity=3)
    for i in range(5):  # not started: nothing is taken off the queue
        queued.record(event(i))
    assert "edl_adapter_sizing_events_dropped_total 2.0" in generate_latest(registry).decode()
    api.released.set()
    queued.start()
    queued.stop()  # sends what was queued first
    assert api.sent == ["job-0", "job-1", "job-2"]


def test_a_recorder_that_raises_does_not_end_the_sending() -> None:
    sent: list[str] = []

    class Flaky:
        def record(self, e: JobEvent) -> None:
            if e.desired == 1:
                raise RuntimeError("boom")
            sent.append(e.deployment)

    queued = QueuedEventRecorder(Flaky(), CollectorRegistry())
    queued.start()
    for i in range(3):
        queued.record(event(i))
    queued.stop()
    assert sent == ["job-0", "job-2"]
