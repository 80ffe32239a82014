"""The differential's ambiguity rule, on hand-made reads (no control plane needed).

The controller logs the sample time of the first pod of the metric answer it read. That pins
the first pod's sample, not the others': a second pod's sample that changed between the
controller's read and the poller's makes the inputs uncertain, and with them the decision.
"""

from __future__ import annotations

from tests.e2e.harness.hpa_diff import MetricRead, Snapshot, Sync, _metric_candidates

T = 1_000.0


def read(t: float, a: tuple[int, int], b: tuple[int, int]) -> Snapshot:
    """A poll at `t` of pods a and b: (sample time, milli value) each; a is the first item."""
    return Snapshot(
        t,
        t + 0.01,
        MetricRead({"a": a[1], "b": b[1]}, a[0], {"a": a[0], "b": b[0]}, "a"),
    )


def test_another_pods_sample_that_changed_around_the_read_is_a_candidate() -> None:
    # a's sample (time 999) is the one the controller logged; b's changed from 80 to 140
    # between two polls of the bracket, and the poll with a's logged sample saw only 80.
    polls = [
        read(T - 0.3, (999, 100_000), (998, 80_000)),
        read(T - 0.1, (1000, 105_000), (1000, 140_000)),
    ]
    sync = Sync(T, 2, 2, 2, metric_stamp=999)
    candidates = {tuple(sorted(c.value.values.items())) for c in _metric_candidates(polls, sync)}
    assert candidates == {
        (("a", 100_000), ("b", 80_000)),
        (("a", 100_000), ("b", 140_000)),
    }


def test_when_no_other_pod_changed_the_logged_sample_pins_one_answer() -> None:
    polls = [
        read(T - 0.3, (999, 100_000), (998, 80_000)),
        read(T - 0.1, (1000, 105_000), (998, 80_000)),
    ]
    sync = Sync(T, 2, 2, 2, metric_stamp=999)
    (only,) = _metric_candidates(polls, sync)
    assert only.value.values == {"a": 100_000, "b": 80_000}
