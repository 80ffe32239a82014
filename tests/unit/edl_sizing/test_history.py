"""The per-size history: weighted means, bounded memory, a stable stored form."""

from __future__ import annotations

import pytest

from edl_sizing import HistoryError, MemoryHistoryStore, SizeHistory, class_key


def test_observations_fold_into_a_weighted_mean_per_size() -> None:
    h = SizeHistory(alpha=0.5)
    h.observe("ns/a", 2, 100.0, now=1.0)
    h.observe("ns/a", 2, 200.0, now=2.0)
    h.observe("ns/a", 3, 240.0, now=3.0)
    assert h.observed("ns/a") == {2: 150.0, 3: 240.0}
    assert h.jobs["ns/a"].sizes[(2, 0)].observations == 2
    assert h.observed("ns/other") == {}


def test_nonsense_observations_are_ignored() -> None:
    h = SizeHistory()
    for size, x in ((0, 10.0), (2, 0.0), (2, -5.0), (2, float("nan")), (2, float("inf"))):
        h.observe("ns/a", size, x, now=1.0)
    h.observe_pause("ns/a", float("nan"), now=1.0)
    assert h.observed("ns/a") == {} and h.pause("ns/a") == 0.0


def test_pause_mean() -> None:
    h = SizeHistory(alpha=0.5)
    h.observe_pause("ns/a", 4.0, now=1.0)
    h.observe_pause("ns/a", 2.0, now=2.0)
    assert h.pause("ns/a") == 3.0


def test_memory_is_bounded_least_recently_updated_first() -> None:
    h = SizeHistory(max_jobs=3, max_sizes=4)
    for i in range(5):
        h.observe(f"ns/j{i}", 1, 10.0, now=float(i))
    assert sorted(h.jobs) == ["ns/j2", "ns/j3", "ns/j4"]
    for n in range(1, 10):
        h.observe("ns/j4", n, 10.0 * n, now=10.0 + n)
    assert sorted(h.observed("ns/j4")) == [6, 7, 8, 9]


def test_stored_form_round_trips_and_is_deterministic() -> None:
    a = SizeHistory()
    a.observe("ns/b", 2, 180.5, now=5.0)
    a.observe("ns/a", 1, 100.0, now=4.0)
    a.observe_pause("ns/a", 3.25, now=6.0)
    text = a.to_json()
    b = SizeHistory()
    b.load_json(text)
    assert b.observed("ns/b") == {2: 180.5} and b.pause("ns/a") == 3.25
    assert b.to_json() == text
    assert text.index('"ns/a"') < text.index('"ns/b"')


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"version": 3, "jobs": {}}',
        '{"version": 1, "jobs": {"a": {"sizes": 1}}}',
        '{"version": 1, "jobs": {"a": {"sizes": {"2@1": [1, 1, 1]}, "pause": [0, 0], '
        '"updated": 1}}}',
        '{"version": 2, "jobs": {"a": {"sizes": {"0@1": [1, 1, 1]}, "pause": [0, 0], '
        '"updated": 1}}}',
    ],
)
def test_unreadable_history_is_a_history_error(text: str) -> None:
    with pytest.raises(HistoryError):
        SizeHistory().load_json(text)


def test_forget_jobs_not_seen_for_long() -> None:
    h = SizeHistory()
    h.observe("ns/old", 1, 10.0, now=1.0)
    h.observe("ns/new", 1, 10.0, now=100.0)
    assert h.forget_older_than(50.0) == 1 and list(h.jobs) == ["ns/new"]


def test_memory_store_hands_out_copies() -> None:
    store = MemoryHistoryStore()

    def change(h: SizeHistory) -> bool:
        h.observe("ns/a", 1, 10.0, now=1.0)
        return True

    after = store.update(change)
    after.observe("ns/a", 2, 20.0, now=2.0)
    assert store.load().observed("ns/a") == {1: 10.0}


def test_a_new_job_of_a_known_class_starts_from_its_classs_sizes() -> None:
    h = SizeHistory()
    klass = class_key("ns", "bert")
    for size, rate in ((1, 10.0), (4, 38.0)):
        h.observe("ns/old", size, rate, 1.0)
        h.observe(klass, size, rate, 1.0)
    assert h.observed("ns/new") == {}
    assert h.observed("ns/new", klass) == {1: 10.0, 4: 38.0}
    h.observe("ns/new", 4, 40.0, 2.0)  # its own measurement wins at its size
    assert h.observed("ns/new", klass) == {1: 10.0, 4: 40.0}
    assert h.observed("ns/new", class_key("other", "bert")) == {4: 40.0}


def test_first_size_and_recent_rescales_survive_a_round_trip() -> None:
    h = SizeHistory()
    h.observe("ns/a", 8, 100.0, 10.0)
    h.observe("ns/a", 4, 60.0, 20.0)
    h.observe_pause("ns/a", 0.5, 30.0, rescales=2)
    h.observe_pause("ns/a", 0.5, 4000.0)
    again = SizeHistory()
    again.load_json(h.to_json())
    assert again.first_size("ns/a") == 8
    assert again.rescales_since("ns/a", 0.0) == 3
    assert again.rescales_since("ns/a", 4000.0 - 3600.0) == 1


def test_records_are_kept_per_placement() -> None:
    """Two workers on one node and two across two nodes are different measurements."""
    h = SizeHistory(alpha=0.5)
    h.observe("ns/a", 2, 20.5, 1.0, nodes=1)
    h.observe("ns/a", 2, 9.1, 2.0, nodes=2)
    h.observe("ns/a", 1, 10.5, 3.0, nodes=1)
    assert h.placed("ns/a") == {(2, 1): 20.5, (2, 2): 9.1, (1, 1): 10.5}
    assert h.observed("ns/a") == {1: 10.5, 2: 20.5}  # per size: the fewest nodes
    klass = class_key("ns", "bert")
    h.observe(klass, 2, 9.0, 4.0, nodes=2)
    h.observe(klass, 3, 29.0, 4.0, nodes=1)
    assert h.placed("ns/new", klass) == {(2, 2): 9.0, (3, 1): 29.0}
    assert h.placed("ns/a", klass)[(2, 2)] == 9.1  # its own wins


def test_the_spread_of_repeated_measurements() -> None:
    h = SizeHistory(alpha=0.5)
    h.observe("ns/a", 4, 100.0, 1.0, nodes=1)
    assert h.spread("ns/a") == 0.0  # one measurement: no spread yet
    h.observe("ns/a", 4, 110.0, 2.0, nodes=1)
    assert h.jobs["ns/a"].sizes[(4, 1)].spread == pytest.approx(0.10)
    h.observe("ns/a", 4, 105.0, 3.0, nodes=1)
    assert h.jobs["ns/a"].sizes[(4, 1)].spread == pytest.approx(0.05)  # 0.10 -> 0.0, halfway
    assert h.spread("ns/a") == pytest.approx(0.05)


def test_progress_and_planned_samples_round_trip() -> None:
    h = SizeHistory(alpha=0.5)
    h.observe_progress("ns/a", 0.25, 1.0)
    assert h.progress("ns/a") == (0.25, 0.0)
    h.observe_progress("ns/a", 0.5, 2.0, planned=1000.0)
    h.observe_progress("ns/a", 0.6, 3.0, planned=1200.0)
    for bad in (-0.1, 1.5, float("nan")):
        h.observe_progress("ns/a", bad, 4.0)
    assert h.progress("ns/a") == (0.6, 1100.0)
    assert h.progress("ns/b") == (None, 0.0)
    again = SizeHistory()
    again.load_json(h.to_json())
    assert again.progress("ns/a") == (0.6, 1100.0)


def test_version_2_keys_placements_and_reads_version_1() -> None:
    """The old stored form is read (its records of unknown placement); the new one is written."""
    old = (
        '{"jobs":{"ns/a":{"first":2,"pause":[0.5,3],"sizes":{"2":[180.5,4,10.0],'
        '"4":[300.0,1,20.0]},"updated":20.0}},"version":1}'
    )
    h = SizeHistory()
    h.load_json(old)
    assert h.placed("ns/a") == {(2, 0): 180.5, (4, 0): 300.0}
    assert h.observed("ns/a") == {2: 180.5, 4: 300.0} and h.pause("ns/a") == 0.5
    h.observe("ns/a", 4, 320.0, 30.0, nodes=2)
    text = h.to_json()
    assert '"version":2' in text and '"4@2":[320.0,1,30.0]' in text and '"2":[180.5,4,10.0]' in text
    again = SizeHistory()
    again.load_json(text)
    assert again.to_json() == text
