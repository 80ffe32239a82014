"""World agreement: every live agent of a job converges on one `World` through a store.

Each agent runs the same deterministic rule (`world.next_members`) on the same records and
publishes a new generation with compare-and-swap, so racing proposals cannot split the job:
one write wins, the others re-read. A debounce window turns a burst of joins or leaves (an HPA
step, a rolling restart) into one generation. A record that does not parse, or whose
generation went backwards, is logged once and replaced by a consistent world built from the
last good world this agent saw.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.elastic.errors import StoreUnavailable, WorldRecordInvalid
from agent.elastic.store import Heartbeat, MembershipStore
from agent.elastic.world import Member, World, next_members

log = logging.getLogger(__name__)


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


@dataclass(frozen=True)
class MembershipSettings:
    """How members agree on a world. Every field has an ``EDL_`` environment variable."""

    min_size: int = 1
    """EDL_MIN_WORLD: below this many live members the job pauses."""
    max_size: int = 64
    """EDL_MAX_WORLD: members beyond this wait as stand-bys."""
    heartbeat_interval: float = 1.0
    """EDL_HEARTBEAT_INTERVAL: seconds between heartbeat renewals."""
    ttl: float = 10.0
    """EDL_MEMBER_TTL: a member whose heartbeat has not changed for this long is gone."""
    debounce: float = 1.0
    """EDL_DEBOUNCE: the live set must be still this long before a new generation is written."""
    max_debounce: float = 5.0
    """EDL_MAX_DEBOUNCE: a pending change is written after this long even if joins keep coming."""
    poll_interval: float = 0.2
    """EDL_POLL_INTERVAL: seconds between reads of the store."""

    @classmethod
    def from_env(cls, **overrides: float | int) -> MembershipSettings:
        """Settings from ``EDL_*`` variables; explicit `overrides` (CLI flags) win."""
        base = cls(
            min_size=_env_int("EDL_MIN_WORLD", cls.min_size),
            max_size=_env_int("EDL_MAX_WORLD", cls.max_size),
            heartbeat_interval=_env_float("EDL_HEARTBEAT_INTERVAL", cls.heartbeat_interval),
            ttl=_env_float("EDL_MEMBER_TTL", cls.ttl),
            debounce=_env_float("EDL_DEBOUNCE", cls.debounce),
            max_debounce=_env_float("EDL_MAX_DEBOUNCE", cls.max_debounce),
            poll_interval=_env_float("EDL_POLL_INTERVAL", cls.poll_interval),
        )
        return cls(**{**base.__dict__, **overrides})

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


@dataclass
class _Pending:
    since: float
    last_change: float
    live: frozenset[str] = field(default_factory=frozenset)


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
        self._last_beat = float("-inf")
        self._last_beat_ok = clock()
        self._unreachable_since: float | None = None
        self._left = False

    @property
    def me(self) -> Member:
        """This agent."""
        return self._me

    @property
    def world(self) -> World | None:
        """The newest world this agent has seen (None before the first one exists)."""
        return self._known

    @property
    def settings(self) -> MembershipSettings:
        """The agreement settings."""
        return self._settings

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
        if current is None or current != self._known:
            return  # the world already moved on (or is being repaired): nothing to force
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

    def leave(self) -> None:
        """Withdraw cleanly: the others drop this member at their next debounce."""
        self._left = True
        try:
            self._store.remove(self._me)
        except StoreUnavailable as e:
            log.warning("leave: membership store unreachable (%s); the member will expire", e)

    def tick(self) -> World | None:
        """One round: renew, read, repair or propose when due. Returns the current world."""
        now = self._clock()
        if not self._left:
            self._renew()
        try:
            heartbeats = self._store.heartbeats()
            record = self._store.read_world()
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return self._known
        self._note_reachable()
        live = self._observe(heartbeats, now)
        current, broken = self._parse(record.text)
        known = self._known
        if current is not None and (known is None or current.generation > known.generation):
            if known is not None:
                log.info(
                    "world generation %d -> %d: %d members",
                    known.generation,
                    current.generation,
                    current.size,
                )
            self._known = current
        target = next_members(self._known, live, self._settings.min_size, self._settings.max_size)
        if broken:
            # Repair now: a broken record blocks everyone; no reason to wait for a debounce.
            self._propose(target, record.version, reason=broken)
            return self._known
        if self._known is not None and target == self._known.members:
            self._pending = None
            return self._known
        if self._due(live, now):
            self._propose(target, record.version, reason="membership changed")
        return self._known

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

    def _observe(self, heartbeats: list[Heartbeat], now: float) -> list[Member]:
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
        return world, ""

    def _due(self, live: list[Member], now: float) -> bool:
        keys = frozenset(m.key for m in live)
        if self._pending is None:
            self._pending = _Pending(since=now, last_change=now, live=keys)
        elif keys != self._pending.live:
            self._pending.live, self._pending.last_change = keys, now
        quiet = now - self._pending.last_change >= self._settings.debounce
        overdue = now - self._pending.since >= self._settings.max_debounce
        return quiet or overdue

    def _propose(self, members: tuple[Member, ...], version: str, reason: str) -> None:
        generation = (self._known.generation if self._known else 0) + 1
        world = World(generation=generation, members=members)
        try:
            won = self._store.write_world(world.to_json(writer=self._me.key), version)
        except StoreUnavailable as e:
            self._note_unreachable(e)
            return
        if not won:
            return  # someone else wrote first; the next tick reads their world
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
