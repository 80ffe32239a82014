"""A watch on one job's Leases and world ConfigMap: wakes the agent when membership changes.

Two streams of the API server's watch (through the official client's `kubernetes.watch`,
behind `KubernetesApi.watch_leases` / `watch_config_map`), each followed by a daemon thread
that re-opens it when the server ends it (every `timeout_seconds`) or it fails (after a
pause). A change is a Lease that appears, vanishes or gets a new holder (a new incarnation
of the member), or new data in the ConfigMap (a world, a coordinator named); a renewal (same
holder) is none, nor is a write of the ConfigMap's status annotations alone.
A re-opened stream starts with ADDED for every existing object: those already known are no
change. A follower of a coordinated job (`members` False) follows the ConfigMap alone. A Role
without ``watch`` (403) ends the stream for good: the agent polls. Only a
hint, like every `StoreWatch`: the agent reads the records themselves.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from agent.elastic.errors import StoreUnavailable, WatchForbidden

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""Pause before re-opening a stream that failed (the API server is down, a 410 Gone)."""


class WatchApi(Protocol):
    """The two watch streams, as `kubernetes_store.KubernetesApi` offers them."""

    def watch_leases(
        self, label_selector: str, timeout_seconds: int
    ) -> Iterator[tuple[str, str, str]]:
        """(event type, Lease name, holder) until the server ends the stream."""

    def watch_config_map(self, name: str, timeout_seconds: int) -> Iterator[tuple[str, str]]:
        """(event type, a digest of its data) of ConfigMap `name`."""


class KubernetesWatch:
    """A `StoreWatch` over the API server's watch of the job's Leases and ConfigMap."""

    def __init__(
        self,
        api: WatchApi,
        label_selector: str,
        world_name: str,
        timeout_seconds: int = 60,
        members: bool = True,
    ) -> None:
        self._changed = threading.Event()
        self._closed = threading.Event()
        self._holders: dict[str, str] = {}
        self._world_version = ""
        self._warned = False
        streams: list[tuple[str, Callable[[], Iterator[bool]]]] = [
            ("world", lambda: self._world_changes(api, world_name, timeout_seconds)),
        ]
        if members:  # a coordinator's (or every member's, uncoordinated): the Leases too
            streams.append(
                ("leases", lambda: self._lease_changes(api, label_selector, timeout_seconds))
            )
        self._threads = [
            threading.Thread(target=self._follow, args=(changes,), name=f"edl-watch-{what}")
            for what, changes in streams
        ]
        for thread in self._threads:
            thread.daemon = True  # blocked in a read until the server's timeout: never joined
            thread.start()

    def wait(self, timeout: float) -> bool:
        """True as soon as a change arrived (within `timeout` s); each change reported once."""
        if self._changed.wait(max(0.0, timeout)):
            self._changed.clear()
            return True
        return False

    def close(self) -> None:
        """Stops following the streams (each thread ends at its next event or timeout)."""
        self._closed.set()

    def _follow(self, changes: Callable[[], Iterator[bool]]) -> None:
        while not self._closed.is_set():
            opened = time.monotonic()
            try:
                for changed in changes():
                    if self._closed.is_set():
                        return
                    if changed:
                        self._changed.set()
            except WatchForbidden as e:
                log.warning("membership watch not allowed (%s): polling only", e)
                return
            except StoreUnavailable as e:
                if not self._warned:
                    log.warning("membership watch interrupted (%s); polling meanwhile", e)
                    self._warned = True
                self._closed.wait(RETRY_SECONDS)
            else:  # the server ended it; one that ends at once is not re-opened in a spin
                self._closed.wait(max(0.0, RETRY_SECONDS - (time.monotonic() - opened)))

    def _lease_changes(self, api: WatchApi, selector: str, timeout: int) -> Iterator[bool]:
        for kind, name, holder in api.watch_leases(selector, timeout):
            if kind == "DELETED":
                yield self._holders.pop(name, None) is not None
            elif kind in ("ADDED", "MODIFIED"):
                yield self._holders.get(name) != holder
                self._holders[name] = holder

    def _world_changes(self, api: WatchApi, name: str, timeout: int) -> Iterator[bool]:
        for kind, version in api.watch_config_map(name, timeout):
            if kind == "DELETED":
                self._world_version = ""
                yield True
            elif kind in ("ADDED", "MODIFIED"):
                yield version != self._world_version
                self._world_version = version
