"""Per-sample ledger (test mode): proves every sample of every epoch was trained exactly once.

With ``EDL_SAMPLE_LEDGER=<dir>`` each trainer appends, *before* a step's forward pass, the
sample ids it is about to train, tagged with generation, global step and wall time; rank 0
also records the step each generation restored from. A step whose gradient reached any rank
was logged by every rank first, and a step that was rolled back (a crash before the state
holder committed it) is recognised because a later generation restored from an earlier step.
`verify` replays that lineage: exactly the steps the final model went through, and their
samples. The times show whether two generations ever trained at once
(`concurrent_generations`: a job running twice).
"""

from __future__ import annotations

import json
import os
import time
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

    def restored(self, step: int, checkpoint: str | None = None) -> None:
        """This generation continues from global step `step` (read from `checkpoint`, if named)."""
        record: dict[str, Any] = {"g": self._generation, "restore": step}
        if checkpoint is not None:
            record["checkpoint"] = checkpoint
        self._write(record)

    def intent(self, step: int, epoch: int, ids: list[int]) -> None:
        """This rank is about to train `ids` as global step `step`."""
        record = {"g": self._generation, "r": self._rank, "s": step, "e": epoch, "ids": ids}
        self._write({**record, "t": time.time()})

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
    """Steps trained (or begun) that a later generation's restore point left out."""
    redone: dict[int, Counter[int]] = field(default_factory=dict)
    """epoch -> the sample ids of those steps: trained again from the restore point."""
    checkpoints: dict[int, str] = field(default_factory=dict)
    """generation -> the durable checkpoint it restored from (no survivor had newer state)."""

    @property
    def redone_samples(self) -> int:
        """Samples trained in rolled-back steps (each one trained again in the lineage)."""
        return sum(sum(c.values()) for c in self.redone.values())

    def unaccounted_redone(self) -> list[tuple[int, int]]:
        """(epoch, id) of rolled-back samples the lineage never trained again (must be [])."""
        return sorted(
            (epoch, i)
            for epoch, ids in self.redone.items()
            for i in ids
            if self.per_epoch.get(epoch, Counter())[i] == 0
        )

    def problems(self, num_samples: int, epochs: int) -> list[str]:
        """Everything that breaks exactly-once (empty when the ledger is clean)."""
        out = [p for epoch in range(epochs) if (p := self._epoch_problem(epoch, num_samples))]
        lost = self.unaccounted_redone()
        if lost:
            out.append(f"{len(lost)} rolled-back samples never trained again, e.g. {lost[:3]}")
        return out + self._other_problems(epochs)

    def problems_so_far(self, num_samples: int, global_batch: int) -> list[str]:
        """`problems` of a job stopped part-way (every member left at a step boundary).

        The epochs the lineage completed hold each sample exactly once; the current one holds
        no sample twice and exactly the samples of the steps it took.
        """
        done, steps = divmod(self.steps, -(-num_samples // global_batch))
        out = [p for epoch in range(done) if (p := self._epoch_problem(epoch, num_samples))]
        current = self.per_epoch.get(done, Counter())
        twice = [i for i, c in current.items() if c > 1]
        trained, expected = sum(current.values()), min(steps * global_batch, num_samples)
        if twice or trained != expected:
            out.append(
                f"epoch {done} so far: {trained} samples in {steps} steps (expected "
                f"{expected}), {len(twice)} repeated"
            )
        return out + self._other_problems(done + 1)

    def _epoch_problem(self, epoch: int, num_samples: int) -> str:
        counts = self.per_epoch.get(epoch, Counter())
        missing = [i for i in range(num_samples) if counts[i] == 0]
        twice = [i for i, c in counts.items() if c > 1]
        if missing or twice:
            return f"epoch {epoch}: {len(missing)} missing, {len(twice)} repeated"
        return ""

    def _other_problems(self, epochs: int) -> list[str]:
        out = []
        extra = sorted(set(self.per_epoch) - set(range(epochs)))
        if extra:
            out.append(f"unexpected epochs {extra}")
        # Only a restore from a durable checkpoint may go back (what came after it is redone).
        starts = [self.restores[g] for g in self.generations]
        gens = self.generations
        if any(
            starts[i] < starts[i - 1] and gens[i] not in self.checkpoints
            for i in range(1, len(gens))
        ):
            out.append(f"restored step went back: {starts}")
        return out


def verify(directory: Path) -> LedgerReport:
    """Replays the ledger directory into the lineage the final model went through.

    Generations in order: each one's restore point rolls back every step of the lineage at or
    after it (trained by earlier generations, now redone), then its own steps join.
    """
    restores: dict[int, int] = {}
    checkpoints: dict[int, str] = {}
    intents: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}
    for path in sorted(directory.glob("ledger-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if "restore" in rec:
                restores[int(rec["g"])] = int(rec["restore"])
                if rec.get("checkpoint"):
                    checkpoints[int(rec["g"])] = str(rec["checkpoint"])
            else:
                intents.setdefault((int(rec["g"]), int(rec["s"])), []).append(
                    (int(rec["e"]), [int(i) for i in rec["ids"]])
                )
    report = LedgerReport(generations=sorted(restores), restores=restores, checkpoints=checkpoints)
    lineage: dict[int, list[tuple[int, list[int]]]] = {}  # step -> what its ranks trained
    for gen in report.generations:
        start = restores[gen]
        for step in [s for s in lineage if s >= start]:
            report.rolled_back_steps += 1
            for epoch, ids in lineage.pop(step):
                report.redone.setdefault(epoch, Counter()).update(ids)
        for (g, step), parts in sorted(intents.items()):
            if g == gen and step >= start:
                lineage[step] = parts
    report.steps = len(lineage)
    for parts in lineage.values():
        for epoch, ids in parts:
            report.per_epoch.setdefault(epoch, Counter()).update(ids)
    return report


def training_spans(directory: Path) -> dict[int, tuple[float, float]]:
    """Per generation, the first and last wall time any of its ranks started a step."""
    spans: dict[int, tuple[float, float]] = {}
    for path in sorted(directory.glob("ledger-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if "t" not in rec:
                continue
            g, t = int(rec["g"]), float(rec["t"])
            first, last = spans.get(g, (t, t))
            spans[g] = (min(first, t), max(last, t))
    return spans


def concurrent_generations(directory: Path) -> list[tuple[int, int]]:
    """Pairs of generations that trained at the same time (a job running twice: must be [])."""
    spans = sorted(training_spans(directory).items(), key=lambda item: item[1][0])
    pairs: list[tuple[int, int]] = []
    for i, (g, (_, end)) in enumerate(spans):
        pairs.extend((g, h) for h, (start, _) in spans[i + 1 :] if start < end)
    return pairs
