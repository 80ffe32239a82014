"""Per-sample ledger (test mode): proves every sample of every epoch was trained exactly once.

With ``EDL_SAMPLE_LEDGER=<dir>`` each trainer appends, *before* a step's forward pass, the sample
ids it is about to train, tagged with generation and global step; rank 0 also records the step
each generation restored from. A step whose gradient reached any rank was logged by every rank
first, and a step that was rolled back (a crash before the state holder committed it) is
recognised because a later generation restored from an earlier step. `verify` replays that
lineage: exactly the steps the final model went through, and their samples.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


class SampleLedger:
    """Appends this trainer's records to its own file in the ledger directory."""

    def __init__(self, directory: Path, member: str, generation: int, rank: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        name = f"ledger-{member}-g{generation}-r{rank}-{os.getpid()}.jsonl"
        self._file: IO[str] = open(directory / name, "a", encoding="utf-8")
        self._generation = generation
        self._rank = rank

    def restored(self, step: int) -> None:
        """This generation continues from global step `step`."""
        self._write({"g": self._generation, "restore": step})

    def intent(self, step: int, epoch: int, ids: list[int]) -> None:
        """This rank is about to train `ids` as global step `step`."""
        self._write({"g": self._generation, "r": self._rank, "s": step, "e": epoch, "ids": ids})

    def _write(self, record: dict[str, Any]) -> None:
        # One write per line, flushed: a SIGKILL right after still leaves it in the page cache.
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Closes the file."""
        self._file.close()


@dataclass
class LedgerReport:
    """What the lineage shows."""

    generations: list[int] = field(default_factory=list)
    restores: dict[int, int] = field(default_factory=dict)
    """generation -> the global step it restored from."""
    steps: int = 0
    """Steps in the final lineage."""
    per_epoch: dict[int, Counter[int]] = field(default_factory=dict)
    """epoch -> how often each sample id was trained in the lineage."""
    rolled_back_steps: int = 0

    def problems(self, num_samples: int, epochs: int) -> list[str]:
        """Everything that breaks exactly-once (empty when the ledger is clean)."""
        out = []
        for epoch in range(epochs):
            counts = self.per_epoch.get(epoch, Counter())
            missing = [i for i in range(num_samples) if counts[i] == 0]
            twice = [i for i, c in counts.items() if c > 1]
            if missing or twice:
                out.append(f"epoch {epoch}: {len(missing)} missing, {len(twice)} repeated")
        extra = sorted(set(self.per_epoch) - set(range(epochs)))
        if extra:
            out.append(f"unexpected epochs {extra}")
        starts = [self.restores[g] for g in self.generations]
        if starts != sorted(starts):
            out.append(f"restored step went back: {starts}")
        return out


def verify(directory: Path) -> LedgerReport:
    """Replays the ledger directory into the lineage the final model went through."""
    restores: dict[int, int] = {}
    intents: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}
    for path in sorted(directory.glob("ledger-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if "restore" in rec:
                restores[int(rec["g"])] = int(rec["restore"])
            else:
                intents.setdefault((int(rec["g"]), int(rec["s"])), []).append(
                    (int(rec["e"]), [int(i) for i in rec["ids"]])
                )
    report = LedgerReport(generations=sorted(restores), restores=restores)
    for index, gen in enumerate(report.generations):
        start = restores[gen]
        later = report.generations[index + 1 :]
        end = restores[later[0]] if later else None
        for (g, step), parts in sorted(intents.items()):
            if g != gen or step < start:
                continue
            if end is not None and step >= end:
                report.rolled_back_steps += 1
                continue
            report.steps += 1
            for epoch, ids in parts:
                report.per_epoch.setdefault(epoch, Counter()).update(ids)
    return report
