"""The ending: a summary a user can check, and the picture of the run.

The summary states what was promised and how it was checked: every sample of every epoch
trained exactly once (the ledger's lineage, `agent.trainer.ledger.verify`), the final
accuracy beside a one-process run of the same seed, and each rescale's pause as the agents
measured it. The PNG shows throughput, world size, the node's slots and the loss over time,
with the rescales and the story's acts marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.trainer.ledger import verify
from examples.demo.telemetry import Rescale
from examples.demo.view import Status

ACCURACY_TOLERANCE = 0.01
"""Elastic vs one process: the same maths, summed in a different order (a test sample or two
may flip); docs/elastic.md §3."""


@dataclass(frozen=True)
class TimelinePoint:
    """One tick of the timeline."""

    t: float
    samples_per_second: float | None
    world: int
    replicas: int
    sizer_desired: int | None
    free_slots: int
    trainer_slots: int
    other_slots: int
    pending_priority: int
    """Pending pods of higher priority (waiting for room)."""
    loss: float | None

    @classmethod
    def of(cls, s: Status) -> TimelinePoint:
        """The figures of one frame."""
        c = s.cluster
        return cls(
            s.t, s.training.samples_per_second, s.training.world.members, c.replicas,
            s.sizer.desired if s.sizer else None, c.free_slots, c.trainer_slots, c.other_slots,
            c.pending_priority, s.training.loss,
        )  # fmt: skip


@dataclass
class Summary:
    """What the run proved."""

    epochs: int
    train_samples: int
    sizes: list[int]
    """Of the worlds the job trained in."""
    rescales: list[Rescale]
    """The world changes the job trained through, and those that trained no step, by time."""
    accuracy: float | None
    reference: float
    ledger_problems: list[str] = field(default_factory=list)
    ledger_steps: int = 0
    generations: int = 0
    rolled_back: int = 0
    story_complete: bool = True
    crashes: int = 0

    @classmethod
    def build(
        cls,
        ledger: Path,
        epochs: int,
        train_samples: int,
        sizes: list[int],
        rescales: list[Rescale],
        accuracy: float | None,
        reference: float,
    ) -> Summary:
        """Replays the ledger and puts the figures together."""
        report = verify(ledger)
        return cls(
            epochs, train_samples, sizes, rescales, accuracy, reference,
            report.problems(train_samples, epochs), report.steps,
            len(report.generations), report.rolled_back_steps,
        )  # fmt: skip

    @property
    def accuracy_matches(self) -> bool:
        """The elastic run's accuracy is the one-process run's, within the tolerance."""
        return self.accuracy is not None and abs(self.accuracy - self.reference) <= (
            ACCURACY_TOLERANCE
        )

    @property
    def ok(self) -> bool:
        """Everything the demo promises held."""
        return (
            self.story_complete
            and not self.ledger_problems
            and self.accuracy_matches
            and self.crashes == 0
        )

    def lines(self) -> list[str]:
        """The summary as printed."""
        sizes = " -> ".join(str(n) for n in self.sizes)
        turns = " -> ".join(str(n) for n in turning_points(self.sizes))
        out = [f"world sizes: {sizes}" + (f" (grew and shrank {turns})" if turns != sizes else "")]
        if not self.story_complete:
            out.append("the story did not complete: the job finished first (try more --epochs)")
        if self.ledger_problems:
            out.append("exactly once: NO; " + "; ".join(self.ledger_problems[:5]))
        else:
            out.append(
                f"exactly once: yes; each of the {self.train_samples} samples of each of the "
                f"{self.epochs} epochs was trained once (0 missing, 0 repeated; ledger: "
                f"{self.ledger_steps} steps in {self.generations} generations, "
                f"{self.rolled_back} rolled back)"
            )
        acc = "-" if self.accuracy is None else f"{self.accuracy:.4f}"
        verdict = "match" if self.accuracy_matches else "MISMATCH"
        out.append(
            f"accuracy: {acc} elastic, {self.reference:.4f} one process, same seed ({verdict})"
        )
        for r in self.rescales:
            if not r.trained:
                out.append(
                    f"generation {r.generation} ({r.after} workers) formed at {r.t:5.1f} s and "
                    "trained no step (the job ended, or the world changed again first)"
                )
                continue
            pause = (
                "not reported by the agents (see the survivors' logs)"
                if r.pause_s is None
                else f"{r.pause_s:.2f} s"
            )
            detect = "" if r.detect_s is None else f", decided {r.detect_s:.1f} s after the change"
            out.append(
                f"rescale: generation {r.generation}, {r.before} -> {r.after} workers at "
                f"{r.t:5.1f} s: training paused {pause}{detect}"
            )
        if self.crashes:
            out.append(f"{self.crashes} agent(s) exited with an error (see the logs)")
        return out


def turning_points(sizes: Sequence[int]) -> list[int]:
    """The sizes where the job changed direction (1, 2, 3, 1, 3 -> 1, 3, 1, 3): what the
    story is about, whether a growth came as one generation or as two."""
    out: list[int] = []
    for n in sizes:
        if len(out) >= 2 and (out[-2] < out[-1] < n or out[-2] > out[-1] > n):
            out[-1] = n
        elif not out or out[-1] != n:
            out.append(n)
    return out


def write_png(
    path: Path,
    timeline: Sequence[TimelinePoint],
    rescales: Sequence[Rescale],
    acts: Sequence[tuple[float, str]],
    where: str,
) -> None:
    """Throughput, world size, slots and loss against time (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t for s in timeline]
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    rate, world, slots, loss = axes
    rate.plot(t, [_nan(s.samples_per_second) for s in timeline], color="tab:blue")
    rate.set_ylabel("samples/s")
    rate.set_title(f"EDL demo {where}: digits grows into freed slots, shrinks for a service")
    world.step(t, [s.world for s in timeline], where="post", label="world size", color="k")
    world.step(t, [s.replicas for s in timeline], where="post", label="replicas (HPA)",
               color="tab:orange", linestyle="--")  # fmt: skip
    world.step(t, [_nan(s.sizer_desired) for s in timeline], where="post",
               label="desired_replicas (sizer)", color="tab:green", linestyle=":")  # fmt: skip
    world.set_ylabel("workers")
    world.set_ylim(0, 3.6)
    world.legend(loc="lower right", fontsize=8)
    slots.stackplot(
        t,
        [s.trainer_slots for s in timeline],
        [s.other_slots for s in timeline],
        [s.free_slots for s in timeline],
        labels=["trainer", "other work", "free"],
        colors=["tab:blue", "tab:red", "0.85"],
        step="post",
    )
    slots.step(t, [s.pending_priority for s in timeline], where="post", color="darkred",
               label="priority pods pending")  # fmt: skip
    slots.set_ylabel("CPU slots")
    slots.legend(loc="upper right", fontsize=8)
    points = [(s.t, s.loss) for s in timeline if s.loss is not None]
    loss.plot([p[0] for p in points], [p[1] for p in points], color="tab:purple", alpha=0.3,
              label="rank 0's share of the batch")  # fmt: skip
    loss.plot([p[0] for p in points], _ema([p[1] for p in points]), color="tab:purple",
              label="moving average")  # fmt: skip
    loss.set_ylabel("training loss")
    loss.set_yscale("log")
    loss.set_xlabel("seconds since the demo started")
    loss.legend(loc="upper right", fontsize=8)
    for r in rescales:
        pause = "" if r.pause_s is None else f"\npause {r.pause_s:.1f} s"
        for ax in axes:
            ax.axvline(r.t, color="0.4", linestyle="--", linewidth=0.8)
        world.annotate(f"{r.before}->{r.after}{pause}", (r.t, 3.05), xytext=(2, 0),
                       textcoords="offset points", fontsize=7)  # fmt: skip
    top = rate.get_ylim()[1]
    footer = []
    for number, (at, headline) in enumerate(acts, 1):
        rate.axvline(at, color="tab:red", linewidth=0.8, alpha=0.6)
        rate.annotate(str(number), (at, top), xytext=(2, -10), textcoords="offset points",
                      fontsize=8, color="tab:red", fontweight="bold")  # fmt: skip
        footer.append(f"{number} ({at:.0f} s) {headline}")
    fig.text(0.01, 0.005, "\n".join(footer), fontsize=8, color="tab:red", va="bottom")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.012 * (len(acts) + 1), 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _ema(values: Sequence[float], alpha: float = 0.2) -> list[float]:
    out: list[float] = []
    for v in values:
        out.append(v if not out else alpha * v + (1 - alpha) * out[-1])
    return out


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value
