"""The local store's watch: a member that comes or goes, or a new world, wakes the agent;
a heartbeat renewal does not (it would cost a read per beat and detect nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.elastic.local_store import LocalStore, LocalWatch
from agent.elastic.store import PollingWatch
from agent.elastic.world import Member, World

pytestmark = [pytest.mark.unit]

A = Member(1.0, "a", "1", "127.0.0.1", (1, 2))
B = Member(2.0, "b", "2", "127.0.0.1", (3, 4))


@pytest.mark.slow
def test_the_local_watch_reports_members_and_the_world_but_not_renewals(tmp_path: Path) -> None:
    store = LocalStore.create(tmp_path)
    store.beat(A)
    watch = store.watch()
    assert isinstance(watch, LocalWatch)
    try:
        store.beat(A)  # a renewal of a member already there
        assert watch.wait(0) is False
        store.beat(B)  # a joiner
        assert watch.wait(0) is True
        assert watch.wait(0) is False  # each change is reported once
        assert store.write_world(World(1, (A, B)).to_json(), "")
        assert watch.wait(0) is True
        store.remove(A)  # a clean leave
        assert watch.wait(0) is True
        store.beat(A)  # back again: a new member to the watch
        assert watch.wait(0) is True
        (tmp_path / "world.json").write_text("hand edit")  # not by rename: still seen
        assert watch.wait(0) is True
    finally:
        watch.close()


@pytest.mark.slow
def test_a_store_without_its_directory_falls_back_to_polling(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "missing")
    watch = store.watch()
    assert isinstance(watch, PollingWatch)
    assert watch.wait(0.0) is False
