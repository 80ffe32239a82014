"""World agreement: every live agent of a job converges on one `World` through a store.

Each agent runs the same deterministic rule (`world.next_members`) on the same records and
publishes a new generation with compare-and-swap, so racing proposals cannot split the job:
one write wins, the others re-read. A debounce window turns a burst of joins or leaves (an HPA
step, a rolling restart) into one generation. A record that does not parse, or whose
generation went backwards, is logged once and replaced by a consistent world built from the
last good world this agent saw. Once the job is finished (`finish`), nothing proposes a new
generation any more, and a repair writes the finished world again: a job is never un-finished.

On a coordinated store (`MembershipStore.coordinated`: Kubernetes) only the coordinator the
record names watches and lists the heartbeats and proposes the worlds that joins and expiries
make (`agent.elastic.coordinator`); the others renew their own heartbeat, follow the world
record through a watch of it alone, and take the role over when its holder is gone. A member's
own writes (a planned leave, a finish, a failure, a forced generation) are the same for all.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.elastic.coordinator import (
    Claim,
    coordinator_is_gone,
    expired_long_ago,
    live_members,
    member_id,
)
from agent.elastic.errors import StoreUnavailable, WorldRecordInvalid
from agent.elastic.failures import FailurePolicy, TrainerFailure
from agent.elastic.option_table import DEFAULTS
from agent.elastic.store import Heartbeat, MembershipStore, StoreWatch, VersionedRecord
from agent.elastic.world import Member, World, next_members

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MembershipSettings:
    """How members agree on a world.

    Every field has an ``EDL_`` variable, read by `edl-agent run --elastic` through the option
    table `agent.elastic.option_table` (``EDL_MEMBER_TTL`` is `ttl`), which holds the defaults.
    """

    min_size: int = DEFAULTS["min_world"]
    """EDL_MIN_WORLD: below this many live members the job pauses."""
    max_size: int = DEFAULTS["max_world"]
    """EDL_MAX_WORLD: members beyond this wait as stand-bys."""
    heartbeat_interval: float = DEFAULTS["heartbeat_interval"]
    """EDL_HEARTBEAT_INTERVAL: seconds between heartbeat renewals; on a coordinated store also
    how often a follower checks its coordinator and re-reads the world without a wake, and
    the coordinator re-lists the heartbeats."""
    ttl: float = DEFAULTS["ttl"]
    """EDL_MEMBER_TTL: a member whose heartbeat has not changed for this long is gone."""
    debounce: float = DEFAULTS["debounce"]
    """EDL_DEBOUNCE: the longest the live set must be still before a new generation is
    written. Adaptive: a lone change to a steady world (no change for a debounce) waits
    `LONE_QUIET_SHARE` of it; otherwise a change waits `JOIN_QUIET_SHARE` of it and each
    further change of the pending set widens the window by as much, so a burst is batched
    while a single joiner is not held the full debounce. A planned leave does not wait
    (`leave`)."""
    max_debounce: float = DEFAULTS["max_debounce"]
    """EDL_MAX_DEBOUNCE: a pending change is written after this long even if joins keep coming."""
    poll_interval: float = DEFAULTS["poll_interval"]
    """EDL_POLL_INTERVAL: seconds between reads of the store."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_size <= self.max_size:
            raise ValueError(f"need 1 <= min_size <= max_size: {self.min_size}..{self.max_size}")
        if self.ttl <= 2 * self.heartbeat_interval:
            raise ValueError("ttl must exceed two heartbeat intervals")


@dataclass
class _Seen:
    beat: str
    changed_at: float
    member: Member


JOIN_QUIET_SHARE = 0.25
"""The quiet a membership change waits, as a share of the debounce (per change seen)."""

LONE_QUIET_SHARE = 0.05
"""The quiet a lone change waits when the world was steady for a debounce before it.

A join that breaks a debounce of stillness is most likely alone (a replacement pod, a
scale-up of one): it is written almost at once. A second change inside that quiet, or any
change while the world is still settling, is a burst and gets `JOIN_QUIET_SHARE` per change.
"""


@dataclass
class _Pending:
    since: float
    last_change: float
    live: frozenset[str] = field(default_factory=frozenset)
    changes: int = 1
    """How often the pending live set changed: the burst so far."""
    lone: bool = False
    """It broke a steady world (no change seen for a debounce before it)."""
    counted_at: float = float("-inf")
    """When `changes` last grew: wakes closer together than a lone change's quiet are one."""
    unlisted: bool = False
    """Wakes were counted as changes without a list (`Membership._coalesced`): the next list's
    live set is the pending one, not one change more."""


class Membership:
    """One agent's view of, and vote on, the job's world."""

    def __init__(
        self,
        store: MembershipStore,
        me: Member,
        settings: MembershipSettings,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._me = me
        self._settings = settings
        self._clock = clock
        self._wall = wall_clock
        self._seen: dict[str, _Seen] = {}
        self._known: World | None = None
        self._pending: _Pending | None = None
        self._changed_at = float("-inf")
        """When this agent last saw the world or the live set change (`LONE_QUIET_SHARE`)."""
        self._last_beat = float("-inf")
        self._last_beat_ok = clock()
        self._unreachable_since: float | None = None
        self._left = False
        self._watch: StoreWatch | None = None
        self._watch_members = True
        """Whether the open watch follows the heartbeats too (a coordinator's)."""
        self._woken = False
        """The watch reported a change since the last tick (coordinated store)."""
        self._coordinating = False
        self._record: VersionedRecord | None = None
        """The world record as last read (coordinated store: re-read on a wake or when old)."""
        self._read_at = float("-inf")
        self._beats: list[Heartbeat] = []
        """The heartbeats as the coordinator last listed them."""
        self._listed_at = float("-inf")
        self._checked_at = float("-inf")
        """When this follower last checked its coordinator's heartbeat."""
        self._floor = float("-inf")
        """Wall time the store came back after an outage: heartbeat ages count from it."""
        self._adopted = ""
        """The version of the record a follower last parsed."""

    @property
    def me(self) -> Member:
        """This agent."""
        return self._me

    @property
    def world(self) -> World | None:
        """The newest world this agent has seen (None before the first one exists)."""
        return self._known

    @property
    def coordinating(self) -> bool:
        """This agent is the job's coordinator.

        Always False on a store that is not coordinated, where every member watches every
        heartbeat.
        """
        return self._coordinating

    @property
    def settings(self) -> MembershipSettings:
        """The agreement settings."""
        return self._settings

    def wait_for_change(self, timeout: float) -> bool:
        """Blocks up to `timeout` s; True as soon as the store says something changed.

        A member came or went, or the world record was replaced: read it now. The watch is
        opened on first use and kept; on a coordinated store a follower's watch is on the
        world record alone, the coordinator's on the heartbeats too (re-opened on a change of
        role).
        """
        members = self._coordinating or not self._store.coordinated
        if self._watch is not None and self._watch_members != members:
            self._watch.close()
            self._watch = None
        if self._watch is None:
            self._watch = self._store.watch(members=members)
            self._watch_members = members
            self._woken = True  # nothing was watched before: read everything once
        if self._watch.wait(timeout):
            self._woken = True
            return True
        return False

    def close(self) -> None:
        """Releases the store watch."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def due_in(self) -> float | None:
        """Seconds until a pending change is due to be written (None: none pending).

        The agent's loop waits no longer than this, so a lone joiner's short debounce is not
        rounded up to the next poll.
        """
        pending = self._pending
        if pending is None:
            return None
        quiet = pending.last_change + self._quiet_needed(pending)
        overdue = pending.since + self._settings.max_debounce
        return max(0.0, min(quiet, overdue) - self._clock())

    def _quiet_needed(self, pending: _Pending) -> float:
        """The adaptive debounce: a share of `debounce` per change seen, at most all of it."""
        debounce = self._settings.debounce
        if pending.lone and pending.changes == 1:
            return debounce * LONE_QUIET_SHARE
        return min(debounce, debounce * JOIN_QUIET_SHARE * pending.changes)

    def pending_for(self) -> float:
        """Seconds since this agent first saw a membership change not yet written (0: none)."""
        return 0.0 if self._pending is None else self._clock() - self._pending.since

    def request_generation(self, reason: str) -> None:
        """Writes the same members as a new generation, so every trainer restarts together.

        Used when a collective broke but nobody left (a transient fault): without a new
        generation the survivors would wait for each other forever.
        """
        try:
            record = self._store.read_world()
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return
        current, _ = self._parse(record.text)
        if current is None or current != self._known or current.finished:
            return  # the world moved on, is being repaired, or the job is done: nothing to force
        self._propose(current.members, record.version, reason=reason)

    def unreachable_for(self) -> float:
        """Seconds since the last successful heartbeat renewal (0 when healthy)."""
        if self._unreachable_since is None:
            return 0.0
        return self._clock() - self._last_beat_ok

    def join(self) -> None:
        """Announce this agent (first heartbeat)."""
        self._left = False
        self._renew(force=True)

    def leave(self, attempts: int = 3) -> None:
        """Withdraw cleanly, and write the world without us at once (no debounce).

        A planned leave (SIGTERM, an HPA scale-down) is known for certain by the one agent
        that leaves: waiting for the others to notice the missing heartbeat and let it settle
        would only keep every rank standing still. The heartbeat goes first, so nobody reads
        the new world with us still live (and re-adds us as a joiner); the world is the same
        deterministic rule over the same records (a stand-by fills the slot), written by
        compare-and-swap, so a racing leave or proposal is re-read, never overwritten.
        """
        self._left = True
        try:
            self._store.remove(self._me)
        except StoreUnavailable as e:
            log.warning("leave: membership store unreachable (%s); the member will expire", e)
            return
        for _ in range(attempts):
            if self._write_without_me():
                return

    def _write_without_me(self) -> bool:
        """One try at the next world without this member; True when nothing is left to do."""
        try:
            heartbeats = self._store.heartbeats()
            record = self._store.read_world()
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return True  # the others expire us in time
        current, broken = self._parse(record.text)
        if broken:
            return True  # the next tick of anyone repairs it, without us
        self._adopt(current)
        known = self._known
        if known is None or known.finished or known.rank_of(self._me.key) is None:
            return True
        live = self._observe(heartbeats, self._clock())
        target = next_members(known, live, self._settings.min_size, self._settings.max_size)
        return self._propose(target, record.version, reason=f"{self._me.id} leaves")

    def tick(self) -> World | None:
        """One round: renew, read, repair or propose when due. Returns the current world."""
        now = self._clock()
        if not self._left:
            self._renew()
        if self._store.coordinated:
            return self._tick_coordinated(now)
        try:
            heartbeats = self._store.heartbeats()
            record = self._store.read_world()
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return self._known
        self._note_reachable()
        live = self._observe(heartbeats, now)
        current, broken = self._parse(record.text)
        self._adopt(current)
        target = next_members(self._known, live, self._settings.min_size, self._settings.max_size)
        return self._decide(record, target, live, broken, now)

    def _tick_coordinated(self, now: float) -> World | None:
        """A round on a coordinated store: follow the record, or coordinate when it names us.

        Without an open watch (`wait_for_change` never called) every round reads everything,
        as on a store that is not coordinated; with one, a round reads what a wake said
        changed, and the rest once a heartbeat interval (the safety net of a lost event).
        """
        woken, self._woken = self._woken, False
        if woken and self._coalesced(now):
            return self._known
        pending = self._pending
        # A pending change waits out its quiet window unread: a wake would say it changed.
        waiting = pending is not None and not self._quiet_over(pending, now)
        # A window that wakes were coalesced into (`_coalesced`) ends with one full read.
        unlisted = pending is not None and pending.unlisted and not waiting
        fresh = woken or self._watch is None or unlisted
        interval = self._settings.heartbeat_interval
        try:
            record = self._record
            if fresh or record is None or now - self._read_at >= interval:
                record = self._read_world_now(now)
                self._note_reachable()  # first: ages count from now on after an outage
            if record.coordinator != self._me.key:
                record = self._follow(record, now, fresh)
            self._coordinating = record.coordinator == self._me.key and not self._left
            if not self._coordinating:
                if record.version != self._adopted:  # parse each version once (1,000: 160 KiB)
                    self._adopt(self._parse(record.text)[0])  # a broken one: the coordinator's
                    self._adopted = record.version
                return self._known
            listed = fresh or now - self._listed_at >= interval
            if listed:
                self._list_heartbeats(now)
            current, broken = self._parse(record.text)
            self._adopt(current)
            live, target = self._target()
            known = self._known
            foreseen = known is not None and not known.finished and target != known.members
            if not listed and foreseen and not waiting:
                self._list_heartbeats(now)  # a change foreseen from the last list: confirm it
                live, target = self._target()
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return self._known
        return self._decide(record, target, live, broken, now)

    def _coalesced(self, now: float) -> bool:
        """Whether a coordinator's wake is counted into the pending change, with no store read.

        While a membership change is pending, not overdue, and the last list and read are
        younger than a heartbeat interval, a wake (the watch saw a Lease come or go, or a new
        world record) is one more change of the burst (wakes within a lone change's quiet,
        `LONE_QUIET_SHARE`, of the last one counted are one change: Leases that a scale-up
        creates together): the quiet window starts again, and the heartbeats are listed once
        when it ends (`due_in`), not once per joiner. A burst of N
        joins thus costs a few lists of N Leases instead of N. Nothing is written without
        that list and a fresh read of the world record, and every write stays one
        compare-and-swap on the version read: a world another member wrote meanwhile is read
        then, never overwritten. Expiries and a broken record wait at most the window
        (bounded by ``EDL_MAX_DEBOUNCE``); a new coordinator's first round always lists.
        """
        pending = self._pending
        if not self._coordinating or pending is None:
            return False
        interval = self._settings.heartbeat_interval
        if now - self._listed_at >= interval or now - self._read_at >= interval:
            return False
        if now - pending.since >= self._settings.max_debounce:
            return False  # overdue: read, list and write what there is
        if now - pending.counted_at >= self._settings.debounce * LONE_QUIET_SHARE:
            pending.changes, pending.counted_at = pending.changes + 1, now
        pending.last_change, pending.unlisted = now, True
        self._changed_at = now
        return True

    def _read_world_now(self, now: float) -> VersionedRecord:
        self._record, self._read_at = self._store.read_world(), now
        return self._record

    def _list_heartbeats(self, now: float) -> None:
        """Lists every heartbeat, and removes those silent for three TTLs (once a list)."""
        self._beats, self._listed_at = self._store.heartbeats(), now
        wall, ttl = self._wall(), self._settings.ttl
        gone = {m.key for m in expired_long_ago(self._beats, wall, ttl, self._floor)}
        gone.discard(self._me.key)
        for hb in self._beats:
            if hb.member.key in gone:
                try:
                    self._store.remove(hb.member)
                except StoreUnavailable:
                    break
        self._beats = [hb for hb in self._beats if hb.member.key not in gone]

    def _target(self) -> tuple[list[Member], tuple[Member, ...]]:
        live = self._observe(self._beats, self._clock())
        settings = self._settings
        return live, next_members(self._known, live, settings.min_size, settings.max_size)

    def _follow(self, record: VersionedRecord, now: float, fresh: bool) -> VersionedRecord:
        """A follower's check of its coordinator; claims the role when it is gone.

        Checked when the record changed or names nobody, else once a heartbeat interval.
        Returns the record to go on with (re-read after a claim, won or lost).
        """
        claim = record.coordinator
        if self._left or not (fresh or not claim or now - self._checked_at >= self._interval):
            return record
        if self._known is not None and self._known.finished:
            return record  # a finished job needs no coordinator
        self._checked_at = now
        beat = self._store.heartbeat_of(member_id(claim)) if claim else None
        ttl = self._settings.ttl
        if not coordinator_is_gone(Claim(claim, beat), self._wall(), ttl, self._floor):
            return record
        won = self._store.claim(self._me.key, record.version)
        record = self._read_world_now(now)
        if won:
            before = f"{claim} is gone" if claim else "none named yet"
            log.info("coordinating the job's membership (%s)", before)
            self._listed_at = float("-inf")  # a new coordinator lists every heartbeat first
        return record

    @property
    def _interval(self) -> float:
        return self._settings.heartbeat_interval

    def _decide(
        self,
        record: VersionedRecord,
        target: tuple[Member, ...],
        live: list[Member],
        broken: str,
        now: float,
    ) -> World | None:
        """Repair, keep or propose, once the records are read (every coordinating member)."""
        if broken:
            # Repair now: a broken record blocks everyone; no reason to wait for a debounce.
            self._propose(target, record.version, broken, after=_generation_in(record.text))
            return self._known
        if self._known is not None and self._known.finished:
            self._pending = None  # the job is done: membership changes make no new world
            return self._known
        if self._known is not None and target == self._known.members:
            self._pending = None
            return self._known
        if self._due(live, now):
            self._propose(target, record.version, reason="membership changed")
        return self._known

    def peek(self) -> World | None:
        """Reads the world record without announcing this agent; returns the current world."""
        try:
            record = self._store.read_world()
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return self._known
        self._adopt(self._parse(record.text)[0])
        return self._known

    def finish(self, step: int | None, attempts: int = 5) -> bool:
        """Marks the job done in the world record (compare-and-swap, written once).

        The current world (whatever its generation) gets the mark; a broken record is repaired
        into the finished world. Returns True once the record says finished, False when the
        store could not be written (the caller may try again).
        """
        for _ in range(attempts):
            read = self._read_parsed()
            if read is None:
                return False
            record, current, broken = read
            self._adopt(current)
            if current is not None and current.finished:
                return True
            base = self._known if broken or current is None else current
            if base is None:  # no world known (the record was lost): a finished empty one
                base = World(0)
            finished = base.finish(step)
            if broken or current is None:
                after = max(base.generation, _generation_in(record.text))
                finished = base.successor(after + 1, base.members).finish(step)
            won = self._swap(finished, record.version)
            if won is None:
                return False
            if won:
                log.info(
                    "job finished at step %s: marked generation %d finished",
                    "?" if step is None else step,
                    finished.generation,
                )
                self._known, self._pending = finished, None
                return True
        return False

    def record_failure(
        self, failure: TrainerFailure, policy: FailurePolicy, attempts: int = 5
    ) -> World | None:
        """Appends `failure` to the world record (compare-and-swap) and applies the budget.

        Every member's failures land in the one record, so the budget counts the job's, not a
        pod's. When the failures within the window exceed the budget the record is marked
        failed (and finished): no agent starts a trainer any more. Returns the world written
        (None: the store could not be written, the record is broken, or the job is already
        finished; the failure is then only logged).
        """
        for _ in range(attempts):
            read = self._read_parsed()
            if read is None:
                return None
            record, current, broken = read
            if broken:
                return None  # a member's next round repairs it; this failure is lost
            self._adopt(current)
            base = current if current is not None else World(0)
            if base.finished:
                return None
            failures = policy.kept((*base.failures, failure), failure.at)
            failed = policy.failed(failures, failure.at)
            world = base.with_failures(failures, failed)
            won = self._swap(world, record.version)
            if won is None:
                return None
            if won:
                recent = len(policy.recent(failures, failure.at))
                budget = (
                    f"{recent} of budget {policy.budget} within {policy.window:g} s"
                    if policy.enabled
                    else "no failure budget"
                )
                log.log(
                    logging.ERROR if failed else logging.WARNING,
                    "recorded trainer failure (%s; %s)%s",
                    failure.describe(),
                    budget,
                    ": the job is failed" if failed else "",
                )
                self._known = world
                return world
        return None

    def _read_parsed(self) -> tuple[VersionedRecord, World | None, str] | None:
        """The record, its world and why it is broken ("": it is not); None: unreachable."""
        try:
            record = self._store.read_world()
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return None
        current, broken = self._parse(record.text)
        return record, current, broken

    def _swap(self, world: World, version: str) -> bool | None:
        """Compare-and-swap `world` in; None when the store could not be reached."""
        self._record = None  # whatever happens, the version read is spent
        try:
            return self._store.write_world(world.to_json(writer=self._me.key), version)
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return None

    def report_status(self, fields: Mapping[str, str]) -> bool:
        """Writes the job's status summary beside the world record; False when it could not."""
        try:
            return self._store.write_status(fields)
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return False

    # -- heartbeats --------------------------------------------------------------------------

    def _renew(self, force: bool = False) -> None:
        now = self._clock()
        if not force and now - self._last_beat < self._settings.heartbeat_interval:
            return
        self._last_beat = now
        try:
            self._store.beat(self._me)
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return
        self._last_beat_ok = now

    def _note_unreachable(self, error: StoreUnavailable) -> None:
        if self._unreachable_since is None:
            self._unreachable_since = self._clock()
            log.warning(
                "membership store unreachable (%s); keeping generation %s until it returns",
                error,
                self._known.generation if self._known else None,
            )

    def _note_reachable(self) -> None:
        if self._unreachable_since is not None:
            now = self._clock()
            log.warning(
                "membership store reachable again after %.1f s", now - self._unreachable_since
            )
            self._unreachable_since = None
            # We could not watch anyone's heartbeat while blind: start their clocks afresh.
            for seen in self._seen.values():
                seen.changed_at = now
            self._floor = self._wall()

    def _observe(self, heartbeats: list[Heartbeat], now: float) -> list[Member]:
        if self._store.coordinated:
            return self._observe_renewals(heartbeats)
        keys = set()
        for hb in heartbeats:
            key = hb.member.key
            keys.add(key)
            seen = self._seen.get(key)
            if seen is None:
                # First sight: trust the writer's wall clock for how old the beat is.
                age = max(0.0, self._wall() - hb.renewed)
                self._seen[key] = _Seen(hb.beat, now - age, hb.member)
            elif seen.beat != hb.beat:
                seen.beat, seen.changed_at = hb.beat, now
        for key in set(self._seen) - keys:
            del self._seen[key]
        live = [s.member for s in self._seen.values() if now - s.changed_at <= self._settings.ttl]
        live = [m for m in live if m.key != self._me.key]
        if not self._left:
            live.append(self._me)
        self._collect_garbage(now)
        return live

    def _observe_renewals(self, heartbeats: list[Heartbeat]) -> list[Member]:
        """The live members by each heartbeat's own renewal time (a coordinated store).

        No store I/O: a coordinator's tick may observe twice; `_list_heartbeats` removes the
        long-expired records once a list.
        """
        wall, ttl = self._wall(), self._settings.ttl
        live = [
            m for m in live_members(heartbeats, wall, ttl, self._floor) if m.key != self._me.key
        ]
        if not self._left:
            live.append(self._me)
        return live

    def _collect_garbage(self, now: float) -> None:
        for seen in list(self._seen.values()):
            if now - seen.changed_at > 3 * self._settings.ttl and seen.member.key != self._me.key:
                try:
                    self._store.remove(seen.member)
                except StoreUnavailable:
                    return

    # -- the world record --------------------------------------------------------------------

    def _parse(self, text: str | None) -> tuple[World | None, str]:
        """The stored world, or (None, why it must be repaired)."""
        if text is None:
            return None, ""
        try:
            world = World.from_json(text)
        except WorldRecordInvalid as e:
            return None, f"world record invalid ({e})"
        if self._known is not None and world.generation < self._known.generation:
            return None, (
                f"world record invalid (generation went back from {self._known.generation} "
                f"to {world.generation})"
            )
        if self._known is not None and self._known.finished and not world.finished:
            return None, (
                f"world record invalid (generation {world.generation} drops the finish of "
                f"generation {self._known.generation})"
            )
        if self._known is not None and self._known.failed and not world.failed:
            return None, (
                f"world record invalid (generation {world.generation} drops the failure of "
                f"generation {self._known.generation})"
            )
        return world, ""

    def _adopt(self, current: World | None) -> None:
        """Takes `current` as the known world when it is newer (and does not un-finish it)."""
        known = self._known
        if current is None or current == known:
            return
        if known is not None:
            if current.generation < known.generation:
                return
            if current.generation == known.generation and (
                (known.finished and not current.finished) or (known.failed and not current.failed)
            ):
                return  # same generation: only new failures or a new mark are news
            if current.generation > known.generation:
                log.info(
                    "world generation %d -> %d: %d members",
                    known.generation,
                    current.generation,
                    current.size,
                )
        self._changed_at = self._clock()
        if current.failed and not (known is not None and known.failed):
            log.info("generation %d is failed: the job is over", current.generation)
        elif current.finished and not (known is not None and known.finished):
            log.info(
                "generation %d is finished (step %s): the job is done",
                current.generation,
                "?" if current.finished_at_step is None else current.finished_at_step,
            )
        self._known = current

    def _due(self, live: list[Member], now: float) -> bool:
        keys = frozenset(m.key for m in live)
        if self._pending is None:
            steady = self._known is not None and now - self._changed_at >= self._settings.debounce
            self._pending = _Pending(now, now, keys, lone=steady, counted_at=now)
            self._changed_at = now
        elif self._pending.unlisted:  # the wakes counted these changes: not one more
            if self._listed_at >= self._pending.last_change:  # listed since the last wake
                self._pending.live, self._pending.unlisted = keys, False
        elif keys != self._pending.live:
            self._changed_at = now
            self._pending.live, self._pending.last_change = keys, now
            self._pending.changes, self._pending.counted_at = self._pending.changes + 1, now
        return self._quiet_over(self._pending, now)

    def _quiet_over(self, pending: _Pending, now: float) -> bool:
        """The pending change is due: quiet for its window, or pending for `max_debounce`."""
        quiet = now - pending.last_change >= self._quiet_needed(pending)
        return quiet or now - pending.since >= self._settings.max_debounce

    def _propose(
        self, members: tuple[Member, ...], version: str, reason: str, after: int = 0
    ) -> bool:
        """Writes the next generation (above `after` too: a repaired record's generation).

        True when it was written, or the store could not be reached (nothing to retry now).
        """
        known = self._known
        generation = max(known.generation if known else 0, after) + 1
        world = World(generation=generation, members=members)
        if known is not None:  # its marks and failures carry on; a finished job keeps its members
            world = known.successor(generation, known.members if known.finished else members)
        self._record = None  # whatever happens, the version read is spent
        try:
            won = self._store.write_world(world.to_json(writer=self._me.key), version)
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return True
        if not won:
            return False  # someone else wrote first; the next tick reads their world
        level = logging.WARNING if reason.startswith("world record invalid") else logging.INFO
        log.log(
            level,
            "%s: wrote generation %d with %d members%s",
            reason,
            generation,
            world.size,
            " (paused: below min)" if world.paused else "",
        )
        self._known = world
        self._pending = None
        self._changed_at = self._clock()
        return True


def _generation_in(text: str | None) -> int:
    """The generation a record claims, however broken the rest of it is (0: none)."""
    try:
        raw = json.loads(text or "")
        generation = raw["generation"]
    except (TypeError, ValueError, KeyError):
        return 0
    ok = isinstance(generation, int) and not isinstance(generation, bool)
    return generation if ok and generation > 0 else 0
