"""A seeded soak of elastic training: a sequence of scale events, some fired mid-rescale.

Real agents (`edl-agent run --elastic`, local membership) and real gloo on 127.0.0.1, training
the elastic digits example (the `Job` of tests/support/digits_job.py). A seeded generator
picks each event from what is legal at that moment (joins below the max; SIGTERMs, trainer
SIGKILLs, agent SIGKILLs, whole-pod SIGKILLs and a SIGSTOPped trainer while at least one
member that holds the training state survives), and fires it either once the world has
settled and trained, or (every few events, a removal) a moment after the previous event,
while that rescale still runs. After the sequence the job is scaled to zero (every member
SIGTERMed: one agreed step boundary), so a run lasts as long as its events, not its epochs.

What it measures, per run:
- *inside*: every pause the agents recorded (their `rescale to generation N (...): pause X s`
  log line, the same figure as `edl_trainer_rescale_pause_seconds`);
- *outside*: action -> first step of the first generation that reflects it (a join: the first
  trained generation containing the joiner; a removal: the first trained generation without
  it, after the action);
- what must hold: the ledger's exactly-once lineage of the steps trained (complete epochs
  once each, the current one without a repeat), a record for every survivor of every world
  change, and no two generations training at the same time.

Used by tests/integration/agent/test_elastic_soak.py (asserts) and bench/bench_rescale.py (prints
the distributions). Every wait is bounded; nothing here depends on how fast a machine is.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from agent.trainer.ledger import concurrent_generations, training_spans, verify
from tests.support.digits_job import (
    NUM_TRAIN,
    SCRIPTS,
    Job,
)
from tests.support.waiting import WaitTimeout, wait_for

REMOVALS = ("sigterm", "kill_trainer", "kill_agent", "kill_pod", "stop_trainer")
"""Ways a member goes away; `join` is the only way one comes."""
WEIGHTS = {"join": 5, "sigterm": 2, "kill_trainer": 2, "kill_agent": 1, "kill_pod": 1}
MAX_STOPPED = 1
"""SIGSTOPped trainers per run (each costs the stall bound)."""
RECORD = re.compile(r"rescale to generation (\d+)(?: \(([^)]*)\))?: pause ([0-9.]+) s")
LEDGER_NAME = re.compile(r"^ledger-(.+)-g(\d+)-r(\d+)-(\d+)\.jsonl$")
GLOBAL_BATCH = 64
STEPS_PER_EPOCH = -(-NUM_TRAIN // GLOBAL_BATCH)
TRAINER_WAIT_SECONDS = 60.0
"""Longest wait for a member's next trainer incarnation when an event needs one."""
MAX_PASSED_OVER = 5
"""Events that found no trainer to act on before a run gives up (a bound, not a figure)."""
AGENT_RECORD_SECONDS = 5.0
"""An agent logs a rescale within a poll of its trainer's first step; one SIGKILLed within
this long after that step may not have (it is no survivor: it left the job)."""


@dataclass(frozen=True)
class SoakSettings:
    """One soak run."""

    seed: int
    reinit: str = "auto"
    """EDL_REINIT of every agent: ``auto`` (in-process) or ``process`` (restarts)."""
    framework: str = "paddle"
    """Which elastic digits example trains (`SCRIPTS`: paddle, torch, paddle-dp, torch-ddp)."""
    events: int = 22
    epochs: int = 200
    """The job never ends first (its step gate holds the last step): the run scales it to
    zero after the sequence."""
    step_sleep: float = 0.1
    initial: int = 3
    max_world: int = 4
    mid_every: int = 3
    """Every this many events, the next one is a removal fired 0.3-2 s after it, while its
    rescale runs (a kill during a rescale); the others wait for the world to settle."""
    settle_timeout: float = 90.0
    """Longest wait for a world to settle before the next event fires anyway."""
    finish_timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    """Extra agent environment (timeouts)."""


SOAK_ENV = {
    "EDL_DEBOUNCE": "0.5",
    "EDL_MAX_DEBOUNCE": "2",
    "EDL_HEARTBEAT_INTERVAL": "0.5",
    "EDL_MEMBER_TTL": "4",
    "EDL_POLL_INTERVAL": "0.1",
    "EDL_DRAIN_TIMEOUT": "30",
    "EDL_INIT_TIMEOUT": "120",
}
"""Membership tuned for a quick local soak; the rescale timeouts are the product defaults."""


@dataclass
class Action:
    """One event as fired."""

    index: int
    kind: str
    target: str
    at: float
    generation: int
    """The world's generation when it fired."""
    mid_rescale: bool


@dataclass(frozen=True)
class Record:
    """One rescale as an agent recorded it."""

    member: str
    generation: int
    pause: float
    why: str

    @property
    def from_generation(self) -> int:
        """The generation the member last trained in before it (``from N:`` in `why`)."""
        m = re.match(r"from (\d+):", self.why)
        return int(m.group(1)) if m else self.generation - 1


@dataclass
class SoakResult:
    """Everything a run showed (figures and the guarantees' evidence)."""

    settings: SoakSettings
    actions: list[Action]
    records: list[Record]
    outside: list[tuple[Action, float | None]]
    """Per action: seconds to the first step of the generation reflecting it (None: superseded)."""
    missing_records: list[tuple[int, str]]
    """(generation, member) where a survivor of a world change recorded no pause."""
    concurrent: list[tuple[int, int]]
    ledger_problems: list[str]
    steps: int
    """Steps in the lineage of the model (the job stops part-way: scaled to zero)."""
    final: dict[str, float] | None
    statuses: dict[str, int | None]
    seconds: float

    def inside(self) -> list[float]:
        """The pause of each recorded world change (the largest any survivor recorded)."""
        worst: dict[int, float] = {}
        for r in self.records:
            worst[r.generation] = max(worst.get(r.generation, 0.0), r.pause)
        return [worst[g] for g in sorted(worst)]

    def outside_seconds(self) -> list[float]:
        """The outside view of each action that some generation reflected."""
        return [s for _, s in self.outside if s is not None]


def distribution(values: list[float]) -> dict[str, float]:
    """min / median / p90 / max (empty: {})."""
    if not values:
        return {}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "n": float(len(ordered)),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": p90,
        "max": ordered[-1],
    }


def describe(values: list[float]) -> str:
    d = distribution(values)
    if not d:
        return "no values"
    return (
        f"n={int(d['n'])} min {d['min']:.2f} median {d['median']:.2f} "
        f"p90 {d['p90']:.2f} max {d['max']:.2f} s"
    )


def unrecorded(
    began: dict[int, dict[str, set[int]]],
    restores: dict[int, int],
    records: list[Record],
    excused: Callable[[int, str], bool] = lambda g, m: False,
) -> list[tuple[int, str]]:
    """(generation, member) for each survivor of a world change that recorded no pause for it.

    `began`: generation -> member -> the global steps it began there (its ledger intents);
    `restores`: generation -> the step it restored from. A member *trained* in a generation
    when it completed a step there: it began two, or a later generation restored past its
    first (a step a peer's death broke was rolled back). One that trained before lives
    through each later change it trains in, and must have recorded that change: its own
    record for that generation. A generation it began a step in but never completed one in
    (the world broke in its first step) is a detour: the record that runs through it, from
    an earlier generation to a later one, is its record. `excused`: (generation, member)
    that could not record (its agent was SIGKILLed at once).
    """

    def trained(g: int, steps: set[int]) -> bool:
        later = [restores[h] for h in sorted(restores) if h > g]
        return len(steps) > 1 or not later or min(steps) < later[0]

    missing = []
    seen: set[str] = set()
    for g in sorted(began):
        done = {m for m, steps in began[g].items() if steps and trained(g, steps)}
        for m in sorted(set(began[g]) & seen):
            if excused(g, m):
                continue
            if m in done:
                ok = any(r.member == m and r.generation == g for r in records)
            else:
                ok = any(r.member == m and r.from_generation < g < r.generation for r in records)
            if not ok:
                missing.append((g, m))
        seen |= done
    return missing


def gone(process: psutil.Process) -> bool:
    """The process has ended (a zombie counts: only its parent's wait is left)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


class Soak:
    """Runs one seeded sequence against a fresh job in `tmp`."""

    def __init__(self, tmp: Path, settings: SoakSettings, log: Callable[[str], None] = print):
        self.settings = settings
        self.rng = random.Random(settings.seed)
        args = ["--epochs", str(settings.epochs), "--global-batch", str(GLOBAL_BATCH)]
        # The job may train every step but its last: it cannot end before the sequence does
        # (the run scales it to zero afterwards), however fast or slow the machine.
        total_steps = settings.epochs * STEPS_PER_EPOCH
        self.job = Job(
            tmp,
            args,
            settings.step_sleep,
            SCRIPTS[settings.framework],
            allowed_steps=total_steps - 1,
        )
        self.job.extra_env.update({**SOAK_ENV, "EDL_REINIT": settings.reinit, **settings.env})
        self.log = log
        self.alive: list[str] = []
        self.stateful: set[str] = set()
        """Members that trained in a settled world (they hold the training state)."""
        self.stopped: list[psutil.Process] = []
        self.frozen: dict[str, psutil.Process] = {}
        """Members whose stopped trainer still stands (they count again if their agent stays)."""
        self.actions: list[Action] = []
        self._names = 0

    # -- observing ------------------------------------------------------------------------

    def world(self) -> tuple[int, list[str]]:
        try:
            raw = json.loads((self.job.store / "digits" / "world.json").read_text())
            return int(raw["generation"]), [str(m["id"]) for m in raw["members"]]
        except (OSError, ValueError, KeyError, TypeError):
            return 0, []

    def first_step(self, name: str, generation: int) -> float | None:
        path = self.job.tmp / name / "control" / f"timings-g{generation}.json"
        try:
            value = json.loads(path.read_text()).get("first_step")
        except (OSError, ValueError):
            return None
        return None if value is None else float(value)

    def settled(self) -> bool:
        """The newest world has everyone (or is full) and trains: every member stepped in
        it, half a second ago or more."""
        return self.unsettled() == ""

    def unsettled(self) -> str:
        """Why the world has not settled ("" once it has): what a failed wait reports."""
        generation, members = self.world()
        if not members:
            return f"no world yet (generation {generation})"
        where = f"generation {generation} {members}, alive {self.alive}"
        if not set(members) <= set(self.alive):
            return f"{where}: {sorted(set(members) - set(self.alive))} gone but still members"
        if len(members) < self.settings.max_world and set(self.alive) - set(members):
            return f"{where}: {sorted(set(self.alive) - set(members))} not in yet"
        firsts = {m: self.first_step(m, generation) for m in members}
        waiting = sorted(m for m, f in firsts.items() if f is None)
        if waiting:
            return f"{where}: no first step yet on {waiting}"
        if time.time() - max(f for f in firsts.values() if f is not None) <= 0.5:
            return f"{where}: stepped under half a second ago"
        return ""

    def log_tail(self, name: str, lines: int = 6) -> str:
        """The last agent lines of member `name`'s log (framework noise left out)."""
        try:
            text = (self.job.tmp / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        agent = [line for line in text.splitlines() if line.startswith("edl-agent")]
        return "\n    ".join(agent[-lines:]) or "(no agent line)"

    def reap(self) -> None:
        for name in list(self.alive):
            if self.job.procs[name].poll() is not None:
                self.alive.remove(name)
                self.stateful.discard(name)
        for name, trainer in list(self.frozen.items()):
            if gone(trainer):  # its agent killed it: it left the job, or started a new one
                del self.frozen[name]
                if self.job.procs[name].poll() is None and name not in self.alive:
                    self.alive.append(name)  # a drain found it frozen: still a member

    def done(self) -> bool:
        return self.job.result.exists()

    # -- acting ---------------------------------------------------------------------------

    def join(self) -> str:
        self._names += 1
        name = f"m{self._names}"
        self.job.start(name)
        self.alive.append(name)
        return name

    def trainer(self, name: str) -> psutil.Process | None:
        try:
            kids = psutil.Process(self.job.procs[name].pid).children()
        except psutil.Error:
            return None
        live = [k for k in kids if not gone(k)]
        return live[0] if live else None

    def freeze_trainer(self, name: str) -> tuple[psutil.Process, float] | None:
        """SIGSTOPs the process group of member `name`'s live trainer: it, and when it stood
        still; None: it has none.

        A trainer that is stopped cannot end on its own before the next signal lands. Signalled
        as it ran, one that was leaving for a rescale (a restart in process mode) took a kill
        as a zombie and its agent started the next incarnation: the member stayed in the job
        while the soak counted it gone. One that ended before it stopped is passed over for
        the agent's next incarnation (bounded: `TRAINER_WAIT_SECONDS`).
        """
        deadline = time.monotonic() + TRAINER_WAIT_SECONDS
        for _ in range(int(TRAINER_WAIT_SECONDS / 0.05) + 1):
            trainer = self.trainer(name)
            if trainer is not None:
                try:
                    at = time.time()
                    os.killpg(trainer.pid, signal.SIGSTOP)
                    for _ in range(200):  # the stop lands when the kernel next runs it
                        status = trainer.status()
                        if status in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
                            break
                        time.sleep(0.05)
                    if status == psutil.STATUS_STOPPED:
                        return trainer, at
                except (ProcessLookupError, psutil.Error):
                    pass  # it ended first: wait for the next incarnation
            if time.monotonic() >= deadline or self.job.procs[name].poll() is not None:
                return None
            time.sleep(0.05)
        return None

    def fire(self, kind: str, name: str) -> float | None:
        """Fires event `kind` at member `name`: when it landed; None: it had no trainer to
        act on."""
        proc = self.job.procs[name]
        if kind in ("sigterm", "kill_agent"):
            at = time.time()
            if kind == "sigterm":
                proc.send_signal(signal.SIGTERM)
            else:
                proc.kill()
            return at
        frozen = self.freeze_trainer(name)
        if frozen is None:
            return None
        trainer, at = frozen
        if kind == "stop_trainer":
            self.stopped.append(trainer)
            self.frozen[name] = trainer
            return at
        try:
            os.killpg(trainer.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if kind == "kill_pod":
            proc.kill()
        return at

    def choose(self, removal: bool = False) -> tuple[str, str]:
        """The next event, from what is legal now (a state holder must survive removals).

        `removal` asks for one (a kill mid-rescale) when any is legal.
        """
        kinds = dict(WEIGHTS)
        if len(self.alive) >= self.settings.max_world:
            kinds.pop("join")
        if len(self.stopped) < MAX_STOPPED:
            kinds["stop_trainer"] = 1
        holders = self.stateful & set(self.alive)
        removable = [n for n in self.alive if holders - {n} and self.trainer(n) is not None]
        if not removable:
            kinds = {"join": 1} if "join" in kinds else {}
        elif removal:
            kinds.pop("join", None)
        if not kinds:
            return "wait", ""
        names = sorted(kinds)
        kind = self.rng.choices(names, weights=[kinds[k] for k in names])[0]
        if kind == "join":
            return kind, ""
        return kind, self.rng.choice(sorted(removable))

    def wait_settled(self, timeout: float) -> bool:
        """True once the world settled within `timeout` (False: it did not, or the job ended)."""

        def settled_now() -> bool:
            self.reap()
            return self.settled()

        try:
            wait_for(
                settled_now, timeout_s=timeout, what="a settled world", interval_s=0.1,
                give_up=self.done,
            )  # fmt: skip
        except WaitTimeout:
            return False
        self.stateful |= set(self.world()[1])
        return True

    # -- the run --------------------------------------------------------------------------

    def run(self) -> SoakResult:
        started = time.monotonic()
        s = self.settings
        try:
            for _ in range(s.initial):
                self.join()
            if not self.wait_settled(180):
                raise AssertionError(f"the first world never trained; see {self.job.tmp}")
            mid, passed_over = False, 0
            while len(self.actions) < s.events and not self.done():
                if not mid and not self.wait_settled(s.settle_timeout):
                    self.log(
                        f"soak: world not settled after {s.settle_timeout:.0f} s: "
                        f"{self.unsettled()}"
                    )
                    for name in sorted(set(self.alive) | set(self.world()[1])):
                        self.log(f"  {name}: {self.log_tail(name)}")
                self.reap()
                kind, name = self.choose(removal=mid)
                if kind == "wait":
                    self.wait_settled(s.settle_timeout)
                    mid = False
                    continue
                generation = self.world()[0]
                at = time.time()
                if kind == "join":
                    name = self.join()
                else:
                    landed = self.fire(kind, name)
                    if landed is None:
                        passed_over += 1
                        self.log(f"soak: {name} had no live trainer for {kind}; passed over")
                        if passed_over > MAX_PASSED_OVER:
                            raise AssertionError(f"{passed_over} events found no trainer")
                        continue
                    at = landed
                    self.alive.remove(name)
                    self.stateful.discard(name)
                self.actions.append(Action(len(self.actions), kind, name, at, generation, mid))
                self.log(
                    f"soak: event {len(self.actions)}: {kind} {name} (generation {generation})"
                )
                mid = len(self.actions) % s.mid_every == 0
                if mid:
                    time.sleep(self.rng.uniform(0.3, 2.0))  # the thing under test: a random moment
            self.finish()
        finally:
            statuses = {n: p.poll() for n, p in self.job.procs.items()}
            for trainer in self.stopped:
                try:
                    trainer.kill()
                except psutil.Error:
                    pass
            self.job.stop_all()
        return self.collect(statuses, time.monotonic() - started)

    def finish(self) -> None:
        """Scales the job to zero once the last world trains: every member leaves cleanly.

        The job would take as long again to train to its end; a clean stop of everyone at
        one step boundary proves the same guarantees on the steps trained so far.
        """
        self.wait_settled(self.settings.settle_timeout)
        self.reap()
        for name in self.alive:
            self.job.procs[name].send_signal(signal.SIGTERM)

        def all_left() -> bool:
            self.reap()
            return not self.alive

        try:
            wait_for(all_left, timeout_s=self.settings.finish_timeout, what="every member gone")
        except WaitTimeout:
            self.log(f"soak: members still up {self.settings.finish_timeout:.0f} s after SIGTERM")

    # -- what it showed -------------------------------------------------------------------

    def began(self) -> dict[int, dict[str, set[int]]]:
        """generation -> member -> the steps its trainer began in it (from the ledger)."""
        out: dict[int, dict[str, set[int]]] = {}
        for path in self.job.ledger.glob("ledger-*.jsonl"):
            m = LEDGER_NAME.match(path.name)
            if not m:
                continue
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            steps = {int(rec["s"]) for rec in lines if "s" in rec}
            if steps:
                out.setdefault(int(m.group(2)), {}).setdefault(m.group(1), set()).update(steps)
        return out

    def records(self) -> list[Record]:
        out = []
        for name in self.job.procs:
            log = (self.job.tmp / f"{name}.log").read_text(errors="replace")
            for m in RECORD.finditer(log):
                out.append(Record(name, int(m.group(1)), float(m.group(3)), m.group(2) or ""))
        return out

    def collect(self, statuses: dict[str, int | None], seconds: float) -> SoakResult:
        began = self.began()
        trained = {g: set(members) for g, members in began.items()}
        spans = training_spans(self.job.ledger)
        records = self.records()
        ledger = verify(self.job.ledger)

        def first_step(g: int) -> float:
            firsts = [f for m in trained[g] if (f := self.first_step(m, g)) is not None]
            return min(firsts) if firsts else spans[g][0]

        killed = {a.target: a.at for a in self.actions if a.kind in ("kill_agent", "kill_pod")}

        def dead(g: int, m: str) -> bool:
            # an agent SIGKILLed right after its trainer stepped had no time to record
            return killed.get(m, float("inf")) < first_step(g) + AGENT_RECORD_SECONDS

        missing = unrecorded(began, ledger.restores, records, dead)

        outside: list[tuple[Action, float | None]] = []
        for a in self.actions:
            after = [g for g in sorted(trained) if g > a.generation and spans[g][0] > a.at]
            if a.kind == "join":
                hit = [g for g in after if a.target in trained[g]]
            elif a.kind == "stop_trainer":
                hit = after  # any new generation: training resumed without (or despite) it
            else:
                hit = [g for g in after if a.target not in trained[g]]
            outside.append((a, first_step(hit[0]) - a.at if hit else None))
        final = None
        problems = ledger.problems_so_far(NUM_TRAIN, GLOBAL_BATCH)
        if self.job.result.exists():  # the job ended before the sequence did
            final = json.loads(self.job.result.read_text())
            problems = ledger.problems(NUM_TRAIN, self.settings.epochs)
        return SoakResult(
            settings=self.settings,
            actions=self.actions,
            records=records,
            outside=outside,
            missing_records=missing,
            concurrent=concurrent_generations(self.job.ledger),
            ledger_problems=problems,
            steps=ledger.steps,
            final=final,
            statuses=statuses,
            seconds=seconds,
        )


def report(result: SoakResult) -> str:
    """The run in a few lines: distributions, per-kind outside view, the guarantees."""
    s = result.settings
    lines = [
        f"soak seed {s.seed} {s.framework} EDL_REINIT={s.reinit}: {len(result.actions)} events in "
        f"{result.seconds:.0f} s ({sum(a.mid_rescale for a in result.actions)} mid-rescale)",
        f"  inside  (recorded pause per world change): {describe(result.inside())}",
        f"  outside (action -> first step reflecting it): {describe(result.outside_seconds())}",
    ]
    for kind in ("join", *REMOVALS):
        values = [v for a, v in result.outside if a.kind == kind and v is not None]
        if values:
            lines.append(f"    {kind:13s} {describe(values)}")
    superseded = sum(v is None for _, v in result.outside)
    lines.append(
        f"  superseded actions {superseded}; survivors without a record "
        f"{len(result.missing_records)}; concurrent generations {result.concurrent}; "
        f"ledger problems {result.ledger_problems}; {result.steps} steps trained"
    )
    return "\n".join(lines)


def run_soak(tmp: Path, settings: SoakSettings, log: Callable[[str], None] = print) -> SoakResult:
    """One soak run in `tmp` (kept for its logs)."""
    tmp.mkdir(parents=True, exist_ok=True)
    return Soak(tmp, settings, log).run()


def main() -> int:
    """`python -m tests.support.elastic_soak SEED MODE DIR [FRAMEWORK]`: one run, printed."""
    import sys

    seed, mode, where = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    framework = sys.argv[4] if len(sys.argv) > 4 else "paddle"
    result = run_soak(where, SoakSettings(seed=seed, reinit=mode, framework=framework))
    print(report(result))
    for r in result.records:
        print(f"record {r.member} g{r.generation} {r.pause:.2f} {r.why}")
    for a, v in result.outside:
        print(f"action {a.index} {a.kind} {a.target} g{a.generation} mid={a.mid_rescale} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
