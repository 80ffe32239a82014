"""A rescale's pause as the sample ledger shows it, from outside the agent that recorded it.

Every rank appends a line to the ledger (`agent.trainer.ledger`) with the wall time *before*
each step. For a member that lived through a world change, training stood still from the
start of its last step in the world it left to the start of its first step in the new one:
the ledger's gap. The agent's record runs from the *end* of that last step to the *end* of
that first step, so the two differ by the difference of those two steps' lengths, which is
less than one step either way. "One step" is read from the same ledger: the longest interval
between two consecutive steps of that member in either world (a step and its boundary
collectives; a machine under load makes it longer, never the comparison tighter), or in any
of its worlds when it took a single step in each of the two.

That bound holds only where the last step in the world left is an ordinary one. When it was
that world's only step (a join right after another), it was also the world's first: its
collectives made the new group's connections, and on a loaded machine it can take several
ordinary steps, a length no ledger line shows. Such a pause is `bounded=False`: measured,
but not comparable (fc13 of 2026-12-06: a 0.47 s first step against 0.14 s ones, and a
record 0.33 s under the gap).

Used by tests/integration/agent/test_elastic_pause_ledger.py (asserts) and printed by the
soak report; it reads files only.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

LEDGER_NAME = re.compile(r"^ledger-(.+)-g(\d+)-r(\d+)-(\d+)\.jsonl$")


def step_starts(ledger: Path) -> dict[tuple[str, int], list[float]]:
    """(member, generation) -> the wall times its trainer started each step there, sorted."""
    out: dict[tuple[str, int], list[float]] = {}
    for path in ledger.glob("ledger-*.jsonl"):
        m = LEDGER_NAME.match(path.name)
        if not m:
            continue
        times = out.setdefault((m.group(1), int(m.group(2))), [])
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                if "t" in record and "s" in record:
                    times.append(float(record["t"]))
    return {key: sorted(times) for key, times in out.items() if times}


@dataclass(frozen=True)
class LedgerPause:
    """One member's pause between two worlds, measured from the ledger."""

    member: str
    from_generation: int
    generation: int
    gap: float
    """Seconds from the start of its last step in `from_generation` to its first in
    `generation`."""
    step: float
    """One step: its longest interval between consecutive steps in either world."""
    bounded: bool = True
    """Whether the last step in the world left was an ordinary one (not that world's only and
    first step), so that `agrees_with` is a fair comparison."""

    def agrees_with(self, recorded: float) -> bool:
        """The recorded pause is the ledger's gap, within one step."""
        return abs(recorded - self.gap) <= self.step


def ledger_pause(
    starts: dict[tuple[str, int], list[float]], member: str, from_generation: int, generation: int
) -> LedgerPause | None:
    """The pause `member` lived from `from_generation` to `generation` (None: not in the
    ledger, or too few steps anywhere to say what one step is)."""
    before = starts.get((member, from_generation), [])
    after = starts.get((member, generation), [])
    if not before or not after:
        return None
    intervals = [b - a for seq in (before, after) for a, b in itertools.pairwise(seq)]
    if not intervals:  # one step in each world (a quick succession of joins): any of its own
        mine = [times for (m, _), times in starts.items() if m == member]
        intervals = [b - a for seq in mine for a, b in itertools.pairwise(seq)]
    if not intervals:
        return None
    return LedgerPause(
        member=member,
        from_generation=from_generation,
        generation=generation,
        gap=after[0] - before[-1],
        step=max(intervals),
        bounded=len(before) > 1,
    )
