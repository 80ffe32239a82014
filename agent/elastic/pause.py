"""One rescale as a member lives it, from training standing still to its next first step.

Why a value of its own: the slow rescales are exactly the ones that take detours (the
trainer crashed, never joined its world and was restarted in a newer one, a further world
change came mid-rescale). An `OpenRescale` is opened once and follows every detour
(`supersede`) instead of being dropped, so the pause it closes with (`close`) is the whole
time without training, and its reasons say what happened. Pure values; the supervisor feeds
them the times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from agent.elastic.world import World
from agent.protocol.control import Timings


def change(old: World | None, new: World) -> str:
    """What differs between two worlds, by member id: ``+c -a``, or ``same members``."""
    before = {m.id for m in old.members} if old is not None else set()
    after = {m.id for m in new.members}
    parts = [f"+{m}" for m in sorted(after - before)] + [f"-{m}" for m in sorted(before - after)]
    return " ".join(parts) or "same members"


@dataclass(frozen=True)
class RescaleRecord:
    """A finished rescale: what `edl_trainer_rescale_pause_seconds` counts, and the log line."""

    generation: int
    """The generation the trainer first stepped in again."""
    from_generation: int
    """The generation it last trained in."""
    reasons: tuple[str, ...]
    path: str
    """``in-process`` (the same process throughout) or ``restart`` (a new process)."""
    pause: float
    """Seconds without training: from when training stood still to the first step."""
    phases: dict[str, float]

    def describe(self) -> str:
        """``rescale to generation N (from M: reasons; path): pause X s (phases)``."""
        why = "; ".join(self.reasons)
        phases = ", ".join(f"{k} {v:.2f}" for k, v in self.phases.items())
        return (
            f"rescale to generation {self.generation} (from {self.from_generation}: {why}; "
            f"{self.path}): pause {self.pause:.2f} s ({phases})"
        )


@dataclass
class OpenRescale:
    """A rescale in progress (wall-clock times)."""

    from_generation: int
    generation: int
    """The generation it is heading for (moves on when a newer world supersedes it)."""
    stalled: float
    """When training stood still: the decision, or the last step if that came earlier."""
    noticed: float
    decided: float
    reasons: list[str] = field(default_factory=list)
    drained: float = 0.0
    spawned: float = 0.0
    restarted: bool = False
    """A new trainer process was started on the way."""
    heads: dict[int, tuple[float, int]] = field(default_factory=dict)
    """Each newer world it was sent on to: generation -> (when decided, reasons so far)."""

    def supersede(self, generation: int, reason: str, decided: float = 0.0) -> None:
        """A newer world came before the trainer stepped: head there, keep the start."""
        if generation > self.generation:
            self.heads[generation] = (decided, len(self.reasons))
        self.generation = max(self.generation, generation)
        if reason and reason not in self.reasons:
            self.reasons.append(reason)

    def split(
        self, generation: int, t: Timings, stopped: float | None = None
    ) -> tuple[RescaleRecord, OpenRescale]:
        """The trainer stepped in `generation` after all, on its way to a newer world.

        It had formed that world before the newer one reached it (or stepped in it between
        two reads of its agent), and stops at its next boundary. That is two world changes
        and two pauses, not one: the record up to its first step there, and the rescale
        that goes on from there to where this one heads, paused from that first step (or
        from the newer world's decision, if the trainer was still stepping then).
        """
        later = sorted(g for g in self.heads if g > generation)
        decided, known = self.heads[later[0]] if later else (0.0, len(self.reasons))
        first = t.first_step or 0.0
        drained = self.drained if self.drained <= first else 0.0  # a later drain: the rest's
        before = replace(self, reasons=self.reasons[:known], heads={}, drained=drained)
        record = before.close(generation, t, stopped)
        start = max(decided, first)
        rest = OpenRescale(
            from_generation=generation,
            generation=self.generation,
            stalled=start,
            noticed=start,
            decided=start,
            reasons=self.reasons[known:] or ["a newer world"],
            drained=self.drained - drained,
            heads={g: (d, n - known) for g, (d, n) in self.heads.items() if later and g > later[0]},
        )
        return record, rest

    def close(self, generation: int, t: Timings, stopped: float | None = None) -> RescaleRecord:
        """The record, once `t` (of `generation`, where it ends) reached the first step.

        `stopped` is the trainer's own report of when it stood still in the world it left
        (`Timings.stopped`, the end of its last step there): the pause starts there, before
        or after the decision (a peer's planned leave stops every rank before the survivors'
        agents decide; a join stops them at the first boundary after it). Without it the
        pause starts at the decision, or earlier when the watchdog saw the steps stop first.
        """
        started, imported, master = t.started or 0.0, t.imported or 0.0, t.master or 0.0
        initialised, first_step = t.initialised or 0.0, t.first_step or 0.0
        start = min(self.decided, self.stalled) if stopped is None else stopped
        noticed = min(self.noticed, start)
        drained, spawned = self.drained, self.spawned
        if not self.restarted:  # no new process: the trainer stopped and re-formed at "started"
            drained = spawned = started or self.decided
        spawned = spawned or started or drained
        drained = drained or spawned
        phases = {
            "detect": max(0.0, self.decided - noticed),
            "drain": max(0.0, drained - self.decided),
            "rendezvous": max(0.0, spawned - drained) + max(0.0, master - imported),
            "init": max(0.0, imported - spawned) + max(0.0, initialised - master),
            "restore": max(0.0, first_step - initialised),
        }
        return RescaleRecord(
            generation=generation,
            from_generation=self.from_generation,
            reasons=tuple(self.reasons),
            path="restart" if self.restarted else "in-process",
            pause=max(0.0, first_step - start),
            phases=phases,
        )


class RescaleTracker:
    """The rescale this member lives through, if any.

    A survivor opens it at a decision; it follows every detour and is closed (and counted)
    at the first step in the new world.
    """

    def __init__(self) -> None:
        self.open: OpenRescale | None = None
        self.trained = False
        """Our trainer has stepped in some world: from then on, world changes are rescales."""
        self._unproven = False
        """The open record was opened before we saw our trainer step anywhere: it is a
        rescale only if the trainer stepped in the world it left after all (its first step
        there ended while the decision was being taken), else a joiner's first world."""

    @property
    def target(self) -> int | None:
        """The generation the open rescale heads for (None: none open)."""
        return None if self.open is None else self.open.generation

    def begin(
        self,
        from_generation: int,
        generation: int,
        why: str,
        decided: float,
        stalled: float,
        noticed: float | None,
    ) -> None:
        """Opens a record (or extends the open one); a joiner's first world is no rescale.

        Before our trainer was seen stepping the record is opened all the same, unproven:
        a first step that ends just as the next world is decided is still a step the
        trainer then paused after (`_proven`).
        """
        if self.open is not None:
            self.open.supersede(generation, why, decided)
            return
        self._unproven = not self.trained
        self.open = OpenRescale(
            from_generation=from_generation,
            generation=generation,
            stalled=stalled,
            noticed=noticed or decided,
            decided=decided,
            reasons=[why],
        )

    def drained(self, at: float) -> None:
        """The trainer of the old world is gone."""
        if self.open is not None:
            self.open.drained = at

    def restarted(self, generation: int, spawned: float) -> None:
        """A new trainer process started in `generation`."""
        rescale = self.open
        if rescale is None:
            return
        if rescale.drained == 0.0:
            rescale.drained = spawned
        rescale.supersede(generation, "")
        rescale.restarted, rescale.spawned = True, spawned

    def passed(self, timings_of: Callable[[int], Timings | None]) -> list[RescaleRecord]:
        """Records of the worlds the trainer stepped in on its way to the rescale's target.

        It had formed them before the newer world reached it: each is a world change of its
        own, closed at its first step there (`OpenRescale.split`).
        """
        records = []
        while self.open is not None:
            rescale = self.open
            between = range(rescale.from_generation + 1, rescale.generation)
            stepped = [(g, t) for g in between if (t := timings_of(g)) and t.first_step]
            if not stepped:
                break
            generation, t = stepped[0]
            record, self.open = rescale.split(generation, t, _stopped(rescale, timings_of))
            if self._proven(rescale, timings_of):
                records.append(record)
            self._unproven, self.trained = False, True  # it stepped in `generation`
        return records

    def _proven(self, rescale: OpenRescale, timings_of: Callable[[int], Timings | None]) -> bool:
        """The trainer trained in the world `rescale` left (always, once it was seen to)."""
        if not self._unproven:
            return True
        left = timings_of(rescale.from_generation)
        return left is not None and left.first_step is not None

    def stepped(
        self,
        generation: int,
        timings: Timings,
        timings_of: Callable[[int], Timings | None] = lambda g: None,
    ) -> RescaleRecord | None:
        """The trainer stepped in `generation`: the finished record, when the rescale ends.

        `timings_of` reads the trainer's report of any generation: where it stood still in
        the world the rescale left.
        """
        self.trained = True
        rescale = self.open
        if rescale is None or generation < rescale.generation:
            return None
        self.open = None
        proven, self._unproven = self._proven(rescale, timings_of), False
        if not proven:
            return None  # its first step is in the new world: a joiner's first world
        return rescale.close(generation, timings, _stopped(rescale, timings_of))


def _stopped(rescale: OpenRescale, timings_of: Callable[[int], Timings | None]) -> float | None:
    """When the trainer reported standing still in the world `rescale` left (None: not said)."""
    left = timings_of(rescale.from_generation)
    return None if left is None else left.stopped
