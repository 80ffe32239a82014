"""The Kubernetes backend's watch: which API server events are membership changes.

A scripted stream stands in for the API server's watch (the real one runs in the e2e layer);
the stream ends like a server timeout, and the watch re-opens it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agent.elastic.errors import StoreUnavailable, WatchForbidden
from agent.elastic.kubernetes_watch import KubernetesWatch

pytestmark = [pytest.mark.unit]

WAIT = 30.0
"""Seconds a test waits for the watch's thread (bounded, never a measure of speed)."""


class ScriptedStreams:
    """Each opened stream plays the next script, then ends; the last one blocks until closed."""

    def __init__(
        self, leases: list[list[tuple[str, str, str]]], world: list[list[tuple[str, str]]]
    ) -> None:
        self.leases, self.world = leases, world
        self.opened = {"leases": 0, "world": 0}
        self.done = threading.Event()
        self.release = threading.Event()

    def watch_leases(
        self, label_selector: str, timeout_seconds: int
    ) -> Iterator[tuple[str, str, str]]:
        n = self.opened["leases"]
        self.opened["leases"] += 1
        if n >= len(self.leases):
            self.done.set()
            self.release.wait(WAIT)
            return
        if self.leases[n] == []:
            raise StoreUnavailable("connection refused")
        yield from self.leases[n]

    def watch_config_map(self, name: str, timeout_seconds: int) -> Iterator[tuple[str, str]]:
        n = self.opened["world"]
        self.opened["world"] += 1
        if n < len(self.world):
            yield from self.world[n]
        else:
            self.release.wait(WAIT)


def test_joins_leaves_and_new_incarnations_are_changes_renewals_are_not() -> None:
    streams = ScriptedStreams(leases=[], world=[])
    watch = KubernetesWatch(streams, "job=x", "edl-x-world")
    try:
        events = [
            ("ADDED", "a", "a/1"),  # already there when the stream opened: learnt once
            ("MODIFIED", "a", "a/1"),  # a renewal
            ("ADDED", "b", "b/1"),  # a joiner
            ("MODIFIED", "b", "b/2"),  # the pod restarted: a new incarnation
            ("DELETED", "a", "a/1"),  # a clean leave
            ("DELETED", "a", "a/1"),  # already gone
        ]
        lease_changes = watch._lease_changes
        got = list(lease_changes(_Playing(leases=events), "job=x", 60))
        assert got == [True, False, True, True, True, False]
        again = list(lease_changes(_Playing(leases=[("ADDED", "b", "b/2")]), "job=x", 60))
        assert again == [False]  # a re-opened stream replays what is known: no change
        world = [("ADDED", "7"), ("MODIFIED", "7"), ("MODIFIED", "8"), ("DELETED", "8")]
        assert list(watch._world_changes(_Playing(world=world), "edl-x-world", 60)) == [
            True,
            False,
            True,
            True,
        ]
    finally:
        watch.close()
        streams.release.set()


def test_a_change_wakes_the_waiter_and_a_failed_stream_is_reopened() -> None:
    streams = ScriptedStreams(
        leases=[[], [("ADDED", "a", "a/1")]],  # refused first (API server down), then a join
        world=[[("ADDED", "3")]],
    )
    watch = KubernetesWatch(streams, "job=x", "edl-x-world")
    try:
        assert watch.wait(WAIT)
        assert streams.done.wait(WAIT)  # re-opened after the failure and after the end
        assert streams.opened["leases"] == 3
    finally:
        watch.close()
        streams.release.set()


class _Playing:
    """One scripted stream of each kind, for the pure event filters."""

    def __init__(
        self,
        leases: tuple[tuple[str, str, str], ...] | list[tuple[str, str, str]] = (),
        world: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
    ) -> None:
        self.leases, self.world = list(leases), list(world)

    def watch_leases(
        self, label_selector: str, timeout_seconds: int
    ) -> Iterator[tuple[str, str, str]]:
        yield from self.leases

    def watch_config_map(self, name: str, timeout_seconds: int) -> Iterator[tuple[str, str]]:
        yield from self.world


def test_a_role_without_watch_leaves_the_agent_polling() -> None:
    class Forbidden(ScriptedStreams):
        def watch_leases(
            self, label_selector: str, timeout_seconds: int
        ) -> Iterator[tuple[str, str, str]]:
            self.opened["leases"] += 1
            raise WatchForbidden("watch leases: HTTP 403 Forbidden")

    streams = Forbidden(leases=[], world=[])
    watch = KubernetesWatch(streams, "job=x", "edl-x-world")
    try:
        lease_thread = next(t for t in watch._threads if t.name == "edl-watch-leases")
        lease_thread.join(WAIT)
        assert not lease_thread.is_alive() and streams.opened["leases"] == 1  # never re-tried
    finally:
        watch.close()
        streams.release.set()


def test_a_followers_watch_opens_the_world_stream_alone() -> None:
    """Issue 38: a follower is woken by a new world, and never sent a Lease event."""
    streams = ScriptedStreams(leases=[[("ADDED", "a", "a/1")]], world=[[("ADDED", "3")]])
    watch = KubernetesWatch(streams, "job=x", "edl-x-world", members=False)
    try:
        assert watch.wait(WAIT)  # the world's opening replay
        assert [t.name for t in watch._threads] == ["edl-watch-world"]
        assert streams.opened == {"leases": 0, "world": 1}
    finally:
        watch.close()
        streams.release.set()
