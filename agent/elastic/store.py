"""The seam between world agreement and where its records live (files, Kubernetes objects).

A store keeps two kinds of record for one job: one heartbeat per member (liveness, carrying
the member's description and an opaque beat that changes on every renewal) and one world
record updated only by compare-and-swap on an opaque version. Everything else (debounce,
ranks, repair, fencing) lives in `Membership`, so every backend gives the same guarantees.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.elastic.world import Member


@dataclass(frozen=True)
class Heartbeat:
    """A member as its heartbeat record describes it."""

    member: Member
    beat: str
    """Changes on every renewal; liveness is judged by when *we* saw it change (skew-safe)."""
    renewed: float
    """Writer's wall time of the last renewal; only used the first time we see a heartbeat."""


@dataclass(frozen=True)
class VersionedRecord:
    """The raw world record and the version a compare-and-swap must quote."""

    text: str | None
    """None when no world record exists yet."""
    version: str
    """Opaque; "" when the record does not exist."""
    coordinator: str = ""
    """The `Member.key` the record names as the job's coordinator ("": none; always "" on a
    store that is not `MembershipStore.coordinated`)."""


class StoreWatch(Protocol):
    """Wakes an agent when the store's records change, so it reads them at once.

    Only a hint: the agent still reads the records themselves (and on a timer, the poll
    interval, as the safety net for a lost or late event and for heartbeats that expire).
    """

    def wait(self, timeout: float) -> bool:
        """Blocks up to `timeout` s; True as soon as a member or the world record changed."""

    def close(self) -> None:
        """Releases what the watch holds (a descriptor, a connection)."""


class PollingWatch:
    """The watch of a store that cannot notify: waits out the timeout (the poll)."""

    def wait(self, timeout: float) -> bool:
        """Sleeps `timeout` s; never reports a change."""
        time.sleep(max(0.0, timeout))
        return False

    def close(self) -> None:
        """Nothing to release."""


class MembershipStore(Protocol):
    """Where one job's heartbeats and world record live. Errors: `StoreUnavailable`."""

    @property
    def coordinated(self) -> bool:
        """Whether one member coordinates.

        True: one member, the coordinator the record names, watches the heartbeats and writes
        the worlds they make; the others follow the record (`agent.elastic.coordinator`).
        False: every member watches every heartbeat (files on one machine).
        """

    def watch(self, members: bool = True) -> StoreWatch:
        """A watch on this job's records (a `PollingWatch` where the backend cannot notify).

        `members` False: on the world record alone (a coordinated store's follower); a store
        that is not coordinated may watch the heartbeats all the same.
        """

    def beat(self, member: Member) -> None:
        """Create or renew this member's heartbeat."""

    def remove(self, member: Member) -> None:
        """Delete this member's heartbeat (a clean leave); no error if already gone."""

    def heartbeats(self) -> list[Heartbeat]:
        """All heartbeat records of the job, live or stale; unreadable ones are skipped."""

    def heartbeat_of(self, member_id: str) -> Heartbeat | None:
        """The heartbeat record of member `member_id` (None: there is none, or unreadable)."""

    def claim(self, key: str, expected_version: str) -> bool:
        """Names `key` the coordinator in the world record (the world itself unchanged).

        Only if the record's version is still `expected_version`; False if it is not.
        """

    def read_world(self) -> VersionedRecord:
        """The current world record."""

    def write_world(self, text: str, expected_version: str) -> bool:
        """Replace the record if its version is still `expected_version`; False if it is not."""

    def write_status(self, fields: Mapping[str, str]) -> bool:
        """Replace the job's status summary (`agent.elastic.job_status`) beside the record.

        False when it could not be written now (no record yet, a concurrent write): the next
        report tries again. The world record is left as it is.
        """
