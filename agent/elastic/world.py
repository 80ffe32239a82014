"""The world: who trains together in one generation, in which order, and where the master is.

A `World` is a pure value. `next_world` is the one rule that turns the previous world plus the
live members into the next one: survivors keep their relative order (so rank 0, the state
holder and store host, moves as little as possible), joiners are appended in join order, and
the size is clipped to ``[min_size, max_size]``. A world below `min_size` is *paused*: it has a
generation but no members, which tells every trainer to stop. A *finished* world records that
the job is done (a trainer of it exited 0, or, *failed*, its trainers failed more often than
its budget allows: `agent.elastic.failures`): no agent starts a trainer in it, and no later
record of the job may drop the mark. The record also carries the failures the budget counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.elastic.errors import WorldRecordInvalid
from agent.elastic.failures import TrainerFailure

RECORD_SCHEMA = 1


@dataclass(frozen=True, order=True)
class Member:
    """One agent taking part in the job.

    The identity is ``(id, incarnation)``: a restarted agent that reuses its pod name is a new
    member, because its trainer state is gone.
    """

    joined: float
    """Wall time the agent registered; orders joiners."""
    id: str
    """Stable name of the agent (the pod name on Kubernetes)."""
    incarnation: str
    """Random tag chosen at agent start."""
    host: str
    """Address the trainer is reachable at."""
    ports: tuple[int, int] = field(compare=False)
    """Two trainer ports; generations alternate, so a new store never meets an old one."""

    @property
    def key(self) -> str:
        """Identity of this member across records."""
        return f"{self.id}/{self.incarnation}"

    def endpoint(self, generation: int) -> str:
        """The trainer endpoint of this member in `generation`."""
        return f"{self.host}:{self.ports[generation % 2]}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as stored in world records and heartbeats."""
        return {
            "id": self.id,
            "incarnation": self.incarnation,
            "host": self.host,
            "ports": list(self.ports),
            "joined": self.joined,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Member:
        """Parse and check one member; raise `WorldRecordInvalid` on anything odd."""
        try:
            ports = tuple(int(p) for p in raw["ports"])
            member = cls(
                joined=float(raw["joined"]),
                id=str(raw["id"]),
                incarnation=str(raw["incarnation"]),
                host=str(raw["host"]),
                ports=(ports[0], ports[1]),
            )
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise WorldRecordInvalid(f"bad member {raw!r}: {e}") from e
        if len(ports) != 2 or not all(0 < p < 65536 for p in ports) or not member.id:
            raise WorldRecordInvalid(f"bad member {raw!r}")
        return member


@dataclass(frozen=True)
class World:
    """One generation of the job: ordered members (index = rank) and the master endpoint."""

    generation: int
    members: tuple[Member, ...] = ()
    finished: bool = False
    """The job is done: nobody trains in this world or any later one."""
    finished_at_step: int | None = None
    """The global step the job finished at (None: the trainer did not say)."""
    failures: tuple[TrainerFailure, ...] = ()
    """The trainer failures the job's budget counts (`agent.elastic.failures`), oldest first;
    every later world carries them on."""
    failed: bool = False
    """The job is finished because its failures exceeded the budget (then `finished` too)."""

    def finish(self, step: int | None) -> World:
        """This world marked done at `step` (a world already marked keeps its step)."""
        if self.finished:
            return self
        return replace(self, finished=True, finished_at_step=step)

    def with_failures(self, failures: tuple[TrainerFailure, ...], failed: bool) -> World:
        """This world with `failures` recorded; `failed` also marks it finished, as failed."""
        if self.finished:
            return replace(self, failures=failures)
        return replace(self, failures=failures, finished=failed, failed=failed)

    def successor(self, generation: int, members: tuple[Member, ...]) -> World:
        """The next world: new members, the same marks and failures (a mark is never dropped)."""
        return replace(self, generation=generation, members=members)

    @property
    def size(self) -> int:
        """Number of ranks; 0 means the job is paused."""
        return len(self.members)

    @property
    def paused(self) -> bool:
        """True when too few members are live to train."""
        return not self.members

    @property
    def keys(self) -> tuple[str, ...]:
        """Member identities in rank order."""
        return tuple(m.key for m in self.members)

    def rank_of(self, key: str) -> int | None:
        """Rank of the member with identity `key`, or None when it is not in this world."""
        for rank, member in enumerate(self.members):
            if member.key == key:
                return rank
        return None

    @property
    def endpoints(self) -> list[str]:
        """Trainer endpoints in rank order (PADDLE_TRAINER_ENDPOINTS)."""
        return [m.endpoint(self.generation) for m in self.members]

    @property
    def master(self) -> str:
        """The store endpoint (PADDLE_MASTER): rank 0's endpoint."""
        if not self.members:
            raise WorldRecordInvalid(f"generation {self.generation} is paused and has no master")
        return self.members[0].endpoint(self.generation)

    def to_json(self, writer: str = "") -> str:
        """The stored record (the finish mark only once set, so older readers see no change)."""
        record: dict[str, Any] = {
            "schema": RECORD_SCHEMA,
            "generation": self.generation,
            "members": [m.to_dict() for m in self.members],
            "writer": writer,
        }
        if self.finished:
            record["finished"] = True
            record["finished_at_step"] = self.finished_at_step
        if self.failures:
            record["failures"] = [f.to_dict() for f in self.failures]
        if self.failed:
            record["failed"] = True
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> World:
        """Parse a stored record; raise `WorldRecordInvalid` unless it is a consistent world."""
        try:
            raw = json.loads(text)
        except (TypeError, ValueError) as e:
            raise WorldRecordInvalid(f"not JSON: {text[:80]!r}") from e
        if not isinstance(raw, dict):
            raise WorldRecordInvalid(f"not an object: {text[:80]!r}")
        if raw.get("schema") != RECORD_SCHEMA:
            raise WorldRecordInvalid(f"unknown schema {raw.get('schema')!r}")
        generation = raw.get("generation")
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            raise WorldRecordInvalid(f"bad generation {generation!r}")
        members_raw = raw.get("members")
        if not isinstance(members_raw, list):
            raise WorldRecordInvalid(f"bad members {members_raw!r}")
        members = tuple(Member.from_dict(m) for m in members_raw if _is_mapping(m))
        if len(members) != len(members_raw):
            raise WorldRecordInvalid("a member is not an object")
        if len({m.key for m in members}) != len(members):
            raise WorldRecordInvalid("duplicate member")
        if len({m.endpoint(generation) for m in members}) != len(members):
            raise WorldRecordInvalid("two members share an endpoint")
        finished = raw.get("finished", False)
        step = raw.get("finished_at_step")
        if not isinstance(finished, bool):
            raise WorldRecordInvalid(f"bad finished {finished!r}")
        if step is not None and (
            not finished or not isinstance(step, int) or isinstance(step, bool) or step < 0
        ):
            raise WorldRecordInvalid(f"bad finished_at_step {step!r}")
        failures_raw, failed = raw.get("failures", []), raw.get("failed", False)
        if not isinstance(failures_raw, list) or not all(_is_mapping(f) for f in failures_raw):
            raise WorldRecordInvalid(f"bad failures {failures_raw!r}")
        if not isinstance(failed, bool) or (failed and not finished):
            raise WorldRecordInvalid(f"bad failed {failed!r}")
        failures = tuple(TrainerFailure.from_dict(f) for f in failures_raw)
        return cls(generation, members, finished, step, failures, failed)


def _is_mapping(value: object) -> bool:
    return isinstance(value, Mapping)


def next_members(
    previous: World | None, live: Iterable[Member], min_size: int, max_size: int
) -> tuple[Member, ...]:
    """The members of the next world: survivors in their old order, then joiners by join time.

    Returns ``()`` (paused) when fewer than `min_size` members are live.
    """
    live_by_key = {m.key: m for m in live}
    survivors = [live_by_key[k] for k in (previous.keys if previous else ()) if k in live_by_key]
    taken = {m.key for m in survivors}
    joiners = sorted(m for m in live_by_key.values() if m.key not in taken)
    members = tuple((survivors + joiners)[:max_size])
    return members if len(members) >= min_size else ()


def survivors(previous: World, current: World) -> Sequence[Member]:
    """Members of `current` that were also in `previous` (they hold the training state)."""
    keys = set(previous.keys)
    return [m for m in current.members if m.key in keys]
