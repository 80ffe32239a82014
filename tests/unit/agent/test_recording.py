from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.trainer.recording import STEP_DURATION_BUCKETS, StepRecorder


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_record_step_counts_steps_samples_and_buckets() -> None:
    rec = StepRecorder(bounds=(0.1, 1.0))
    rec.record_step(32, 0.05)
    rec.record_step(32, 0.1)  # exactly on a bound: Prometheus `le` puts it in that bucket
    rec.record_step(16, 5.0)
    snap = rec.snapshot()
    assert (snap.steps, snap.samples) == (3, 80)
    assert snap.step_bucket_counts == (2, 0, 1)
    assert snap.step_seconds_sum == pytest.approx(5.15)


def test_begin_end_step_measures_with_the_clock() -> None:
    clock = FakeClock()
    rec = StepRecorder(clock=clock, wall=lambda: 1_000.0)
    rec.begin_step()
    clock.now += 0.02
    assert rec.end_step(8) == pytest.approx(0.02)
    clock.now += 5.0  # five seconds later, the last step is still dated when it ended
    snap = rec.snapshot()
    assert snap.steps == 1 and snap.samples == 8
    assert snap.last_step_unix == pytest.approx(995.0)


def test_step_and_comm_context_managers() -> None:
    clock = FakeClock()
    rec = StepRecorder(clock=clock)
    with rec.step(samples=4):
        with rec.comm(nbytes=1024):
            clock.now += 0.003
        clock.now += 0.007
    snap = rec.snapshot()
    assert (snap.steps, snap.samples, snap.comm_bytes, snap.comm_calls) == (1, 4, 1024, 1)
    assert snap.comm_seconds == pytest.approx(0.003)
    assert snap.step_seconds_sum == pytest.approx(0.010)


def test_a_failed_step_is_not_counted() -> None:
    rec = StepRecorder()
    with pytest.raises(RuntimeError), rec.step(samples=4):
        raise RuntimeError("loss is nan")
    assert rec.snapshot().steps == 0


def test_before_any_step_there_is_no_last_step_time() -> None:
    assert StepRecorder().snapshot().last_step_unix is None


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        StepRecorder(bounds=(1.0, 0.5))
    with pytest.raises(ValueError):
        StepRecorder(bounds=())


@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), max_size=200))
def test_histogram_counts_every_step_once(durations: list[float]) -> None:
    rec = StepRecorder()
    for d in durations:
        rec.record_step(1, d)
    snap = rec.snapshot()
    assert sum(snap.step_bucket_counts) == snap.steps == len(durations)
    assert len(snap.step_bucket_counts) == len(STEP_DURATION_BUCKETS) + 1
    for i, bound in enumerate(STEP_DURATION_BUCKETS):
        lower = STEP_DURATION_BUCKETS[i - 1] if i else float("-inf")
        assert snap.step_bucket_counts[i] == sum(1 for d in durations if lower < d <= bound)
