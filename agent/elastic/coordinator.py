"""Who coordinates a job's membership, and who is live: pure rules over the stored records.

On a store that names a coordinator (`MembershipStore.coordinated`: the Kubernetes backend),
one member, the one the world record's claim names, watches every member's heartbeat and
writes the worlds that joins, leaves and expiries make; every other member (a *follower*)
renews its own heartbeat, watches the world record only, and checks once a heartbeat interval
that the coordinator it names is still live. A follower that finds the claim empty, or naming
a member whose heartbeat is gone, of another incarnation, or older than the TTL, claims the
role itself by compare-and-swap on the world record: of racing followers exactly one wins,
the others read its claim. Takeover is thus bounded by TTL + one heartbeat interval.

Liveness is judged from each heartbeat's own renewal time (a Lease's ``renewTime``), not from
when this agent first saw it: a new coordinator reaches the same verdict as the one before it
would have (it neither expires a member renewed a moment ago nor keeps one silent for a TTL).
It trusts the members' clocks to agree within TTL - heartbeat interval (NTP does far better).
After this agent could not reach the store, every renewal it could not see is given the
benefit of the doubt: ages count from when the store came back (`floor`), never from before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.elastic.store import Heartbeat
from agent.elastic.world import Member


def age(heartbeat: Heartbeat, wall_now: float, floor: float = float("-inf")) -> float:
    """Seconds since `heartbeat` was renewed (by its writer's clock), counted from `floor` on.

    A renewal time that did not parse (0) is as old as `floor` makes it.
    """
    return max(0.0, wall_now - max(heartbeat.renewed, floor))


def live_members(
    heartbeats: Iterable[Heartbeat], wall_now: float, ttl: float, floor: float = float("-inf")
) -> list[Member]:
    """The members whose heartbeat was renewed within `ttl` of `wall_now`."""
    return [hb.member for hb in heartbeats if age(hb, wall_now, floor) <= ttl]


def expired_long_ago(
    heartbeats: Iterable[Heartbeat], wall_now: float, ttl: float, floor: float = float("-inf")
) -> list[Member]:
    """Members silent for three TTLs: their heartbeat records are garbage."""
    return [hb.member for hb in heartbeats if age(hb, wall_now, floor) > 3 * ttl]


@dataclass(frozen=True)
class Claim:
    """The coordinator a world record names (``""``: none yet) and its heartbeat, if any."""

    key: str
    """The coordinator's `Member.key`, or ``""``."""
    heartbeat: Heartbeat | None
    """Its heartbeat record as read (None: there is none, or the claim is empty)."""


def member_id(key: str) -> str:
    """The member id of a `Member.key` (``id/incarnation``)."""
    return key.rpartition("/")[0] or key


def coordinator_is_gone(
    claim: Claim, wall_now: float, ttl: float, floor: float = float("-inf")
) -> bool:
    """Whether a follower must claim the role: no coordinator, or one no longer live.

    Gone: the claim is empty; its member has no heartbeat (a clean leave, the pod deleted);
    the heartbeat is another incarnation's (the pod restarted under the same name); or it
    was not renewed within `ttl` (a lost node, a silent agent).
    """
    if not claim.key:
        return True
    hb = claim.heartbeat
    if hb is None or hb.member.key != claim.key:
        return True
    return age(hb, wall_now, floor) > ttl
