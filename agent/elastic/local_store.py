"""Membership store in a directory on one machine: for tests, the demo and single-host jobs.

Layout: ``<root>/world.json`` (the world record; its version is the SHA-256 of its text, so a
hand edit changes it too), ``<root>/world.lock`` (an `flock` serialising compare-and-swap),
``<root>/members/<id>.json`` (one heartbeat per member), ``<root>/status.json`` (the job's
status summary, `agent.elastic.job_status`). Every write goes to a temporary file
and is renamed into place, so a reader never sees half a record.

`LocalWatch` tells an agent within milliseconds that a member came or went or the world
record changed (Linux inotify through `inotify_simple`, a thin maintained wrapper of the
kernel calls), so detection does not wait for the next poll.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from agent.elastic.errors import StoreUnavailable, WorldRecordInvalid
from agent.elastic.store import Heartbeat, PollingWatch, StoreWatch, VersionedRecord
from agent.elastic.world import Member

log = logging.getLogger(__name__)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class LocalStore:
    """A `MembershipStore` in a local directory (atomic renames + an flock for CAS)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._counter = 0

    @classmethod
    def create(cls, root: Path) -> LocalStore:
        """A store in `root`, creating the directory if needed (the job's first use)."""
        root.mkdir(parents=True, exist_ok=True)
        return cls(root)

    @property
    def root(self) -> Path:
        """The directory holding this job's records."""
        return self._root

    @property
    def coordinated(self) -> bool:
        """False: on one machine every member watches every heartbeat (cheap: files)."""
        return False

    def watch(self, members: bool = True) -> StoreWatch:
        """An inotify watch on the records; a `PollingWatch` where inotify is unavailable.

        Always on the heartbeats too (`members` is for coordinated stores).
        """
        try:
            return LocalWatch(self._root)
        except OSError as e:  # no inotify (another OS, the instance limit), or no directory
            log.warning("no change notification on %s (%s): polling", self._root, e)
            return PollingWatch()

    def _dir(self, *parts: str) -> Path:
        path = self._root.joinpath(*parts)
        try:
            # Never recreate a vanished root: that would hide an outage and fork the job.
            path.mkdir(exist_ok=True)
        except OSError as e:
            raise StoreUnavailable(f"local store {path}: {e}") from e
        return path

    def beat(self, member: Member) -> None:
        """Write this member's heartbeat with a fresh beat counter."""
        self._counter += 1
        body = json.dumps(
            {
                "member": member.to_dict(),
                "beat": f"{os.getpid()}-{self._counter}",
                "renewed": time.time(),
            }
        )
        try:
            _atomic_write(self._dir("members") / f"{member.id}.json", body)
        except OSError as e:
            raise StoreUnavailable(f"local store {self._root}: {e}") from e

    def remove(self, member: Member) -> None:
        """Delete the heartbeat file of `member`."""
        path = self._root / "members" / f"{member.id}.json"
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise StoreUnavailable(f"local store {self._root}: {e}") from e

    def heartbeats(self) -> list[Heartbeat]:
        """Every parseable heartbeat file."""
        directory = self._root / "members"
        if not self._root.is_dir():
            raise StoreUnavailable(f"local store {self._root} is missing")
        out: list[Heartbeat] = []
        try:
            paths = sorted(directory.glob("*.json")) if directory.is_dir() else []
        except OSError as e:
            raise StoreUnavailable(f"local store {self._root}: {e}") from e
        for path in paths:
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                member = Member.from_dict(raw["member"])
                out.append(Heartbeat(member, str(raw["beat"]), float(raw["renewed"])))
            except FileNotFoundError:
                continue  # removed between glob and read
            except (OSError, ValueError, KeyError, TypeError, WorldRecordInvalid) as e:
                log.warning("ignoring unreadable heartbeat %s: %s", path, e)
        return out

    def heartbeat_of(self, member_id: str) -> Heartbeat | None:
        """The heartbeat of `member_id`, from the heartbeats."""
        return next((hb for hb in self.heartbeats() if hb.member.id == member_id), None)

    def claim(self, key: str, expected_version: str) -> bool:
        """Never: a local store names no coordinator (`coordinated` is False)."""
        return False

    def read_world(self) -> VersionedRecord:
        """The record; its version is the digest of the text itself (read in one go)."""
        if not self._root.is_dir():
            raise StoreUnavailable(f"local store {self._root} is missing")
        text = self._read_text()
        return VersionedRecord(text, _digest(text))

    def _read_text(self) -> str | None:
        try:
            # A hand-mangled record must reach the parser (which repairs it): not an outage.
            return (self._root / "world.json").read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreUnavailable(f"local store {self._root}: {e}") from e

    def write_world(self, text: str, expected_version: str) -> bool:
        """Compare-and-swap under an flock on ``world.lock``."""
        root = self._dir()
        try:
            with open(root / "world.lock", "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if _digest(self._read_text()) != expected_version:
                    return False
                _atomic_write(root / "world.json", text)
                return True
        except OSError as e:
            raise StoreUnavailable(f"local store {self._root}: {e}") from e

    def write_status(self, fields: Mapping[str, str]) -> bool:
        """Replaces ``status.json`` (atomically; no compare-and-swap: one writer at a time)."""
        if not (self._root / "world.json").exists():
            return False
        try:
            _atomic_write(self._root / "status.json", json.dumps(dict(fields), sort_keys=True))
        except OSError as e:
            raise StoreUnavailable(f"local store {self._root}: {e}") from e
        return True


_WORLD = "world.json"
_DIR_EVENTS = inotify_flags.MOVED_TO | inotify_flags.CREATE | inotify_flags.DELETE
_DIR_EVENTS |= inotify_flags.MOVED_FROM | inotify_flags.CLOSE_WRITE


class LocalWatch:
    """inotify on ``<root>`` and ``<root>/members``: members that come or go, a new world.

    Heartbeat renewals (a rename over an existing name) are no change: waking every agent
    for each renewal would cost a store read per beat and detect nothing; expiry is a
    matter of time, which the poll covers. Temporary files (``.name.tmp``) are ignored.
    """

    def __init__(self, root: Path) -> None:
        self._inotify = INotify()
        try:
            members = root / "members"
            members.mkdir(exist_ok=True)
            self._root_wd = self._inotify.add_watch(root, _DIR_EVENTS)
            self._members_wd = self._inotify.add_watch(members, _DIR_EVENTS)
            self._names = {p.name for p in members.glob("*.json")}
        except OSError:
            self._inotify.close()
            raise

    def wait(self, timeout: float) -> bool:
        """True once an event that changes membership or the world arrived within `timeout`."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = deadline - time.monotonic()
            try:
                events = self._inotify.read(timeout=max(0, round(left * 1000)))
            except OSError as e:
                log.warning("membership watch failed (%s): polling", e)
                time.sleep(max(0.0, left))
                return False
            if any(self._changes(e.wd, e.mask, e.name) for e in events):
                return True
            if time.monotonic() >= deadline:
                return False

    def _changes(self, wd: int, mask: int, name: str) -> bool:
        if mask & inotify_flags.Q_OVERFLOW:
            return True  # events were lost: something may have changed
        if name.startswith(".") or not name.endswith(".json"):
            return False
        if wd == self._root_wd:
            return name == _WORLD
        if mask & (inotify_flags.DELETE | inotify_flags.MOVED_FROM):
            self._names.discard(name)
            return True
        if name in self._names:
            return False  # a renewal
        self._names.add(name)
        return True

    def close(self) -> None:
        """Closes the inotify descriptor."""
        self._inotify.close()


def _digest(text: str | None) -> str:
    return "" if text is None else hashlib.sha256(text.encode()).hexdigest()[:16]
