"""One run of the demo: the loop, tick by tick, then the ending.

:class:`Demo` is what both demos share: the work folder, the one-process reference run,
the tick loop (the telemetry reads the world and the agents; the story plays its next act
when its condition holds; the cluster reacts; the view shows it all) and the ending (the
summary and the PNG). :class:`EmbeddedDemo` is ``make demo``: each tick its kubelet starts
and stops agents for the simulated cluster's pods, the HPA model syncs on the adapter's
``desired_replicas`` when a sync period has passed and sets the Deployment's replicas, the
ReplicaSet and the scheduler react, and the cluster files are rewritten for the adapter.
``make demo-cluster`` is :class:`examples.demo.on_cluster.ClusterDemo`; both start from
:mod:`examples.demo.cli`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from agent.protocol.control import Timings
from agent.protocol.errors import ProtocolError
from agent.trainer.step_gate import StepGate
from examples.demo.cluster import ClusterFiles, JobSpec, SimulatedCluster
from examples.demo.control import HPA_FILE, AdapterFiles, DemoAdapter, HpaLoop, write_catalogue
from examples.demo.kubelet import AgentSettings, LocalKubelet
from examples.demo.probe import free_port
from examples.demo.processes import ProcessGroup
from examples.demo.report import Summary, TimelinePoint, write_png
from examples.demo.story import Stage, Story
from examples.demo.telemetry import JobTelemetry, Training, local_world
from examples.demo.view import (
    ClusterState,
    LiveView,
    PlainView,
    Sizer,
    Status,
    View,
    cluster_state,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = ".edl-demo"
AGENT_ENV = {"EDL_DEBOUNCE": "3", "EDL_MAX_DEBOUNCE": "10"}
"""Joiners started together register once their trainers have imported Paddle, seconds apart
on a loaded machine: a longer debounce than the default 1 s makes them one world."""


class StoryGate:
    """Keeps the job from ending before the story has played, on any machine.

    Why: the last act (the service leaves, the job grows back) must happen before the job's
    last step however slowly the machine rescales. The step gate (``--step-gate``) holds the
    job's last tenth until it has grown back; while an act still waits for steps in its
    world, the gate always allows that act's dwell and more, so it never holds a step the
    story needs; it never allows the last step before the ending.
    """

    def __init__(self, gate: StepGate, total_steps: int, dwell_steps: int, batch: int) -> None:
        self._gate = gate
        self._total = total_steps
        self._dwell = dwell_steps
        self._batch = batch
        self._allowed = max(1, total_steps - total_steps // 10)
        self._open = False
        gate.allow(self._allowed)

    def update(self, training: Training, ending: bool, story_done: bool) -> None:
        """``ending``: the story has played and the job has grown back (open for good)."""
        if self._open:
            return
        if ending:
            self._gate.allow_all()
            self._open = True
            return
        if story_done:
            return  # the job waits at the gate until it has grown back
        done = int(training.samples // self._batch)
        wanted = min(self._total - 1, max(self._allowed, done + self._dwell + 1))
        if wanted != self._allowed:
            self._allowed = wanted
            self._gate.allow(wanted)


class DemoError(RuntimeError):
    """The demo could not run to its end; the message says why (and where the logs are)."""


@dataclass(frozen=True)
class DemoOptions:
    """What `python -m examples.demo` takes."""

    epochs: int = 30
    dwell_steps: int = 50
    """Steps the job trains in a world before the story's next act."""
    sample_sleep: float = 0.003
    """Simulated compute per sample (s): a slot is a device, so 3 workers go ~3x faster."""
    global_batch: int = 64
    seed: int = 0
    out: Path = REPO_ROOT / "out" / "demo"
    live: bool = False
    timeout_s: float = 600.0
    tick_s: float = 0.5


@dataclass
class EventLog:
    """The events both views show, each stamped with the demo's time."""

    events: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    acts: list[tuple[float, str]] = field(default_factory=list)

    def add(self, t: float, text: str) -> None:
        """One event."""
        line = f"{t:6.1f} s  {text}"
        self.events.append(line)
        self.new.append(line)

    def act(self, t: float, headline: str) -> None:
        """A story act (an event, and a mark on the PNG)."""
        self.add(t, headline)
        self.acts.append((t, headline))

    def take(self) -> list[str]:
        """The events since the last call."""
        out, self.new = self.new, []
        return out


class Demo:
    """The shared frame of a demo run; subclasses bring the cluster."""

    title = "on a cluster"
    command = "python -m examples.demo"

    def __init__(self, opts: DemoOptions, out: TextIO = sys.stdout) -> None:
        self.opts = opts
        self.out = out
        self.work = opts.out / "work"
        self.job = JobSpec()
        self.procs = ProcessGroup()
        self.log = EventLog()
        self.result = self.work / "result.json"
        self.gate = StepGate(self.work / "step-gate")
        """Holds the job's last steps until the story has played (:class:`StoryGate`)."""
        self.stopping = False
        """Set once a stop was asked for (Ctrl-C)."""
        self._t0 = time.monotonic()
        self._t0_wall = time.time()
        self._generation = 0
        self._awaiting_step: tuple[int, int] | None = None
        """(generation, workers) of the newest world whose first step is not logged yet."""
        self._sizer: Sizer | None = None

    def now(self) -> float:
        """Seconds since the demo began."""
        return time.monotonic() - self._t0

    def say(self, text: str) -> None:
        """A line before or after the live part."""
        self.out.write(text + "\n")
        self.out.flush()

    # -- what a subclass brings ---------------------------------------------------------------

    def start(self) -> Stage:
        """Brings the cluster up; returns the stage the story plays on."""
        raise NotImplementedError

    def launch(self) -> None:
        """Once the story has set the scene: the other work runs, then the job starts."""
        raise NotImplementedError

    def sync_agents(self) -> dict[str, tuple[str, int, Path]]:
        """Brings the agents in line with the pods; returns the running ones: pod -> (host,
        metrics port, log file)."""
        raise NotImplementedError

    def react(self, t: float) -> None:
        """One tick of the cluster's control loops (before the frame is drawn)."""
        raise NotImplementedError

    def cluster_state(self) -> ClusterState:
        """The cluster's side of the frame."""
        raise NotImplementedError

    def sizer(self) -> Sizer | None:
        """What the sizer said last (None before its first decision)."""
        raise NotImplementedError

    def drained(self, since_finish: float) -> bool:
        """Whether the finished job's agents are gone (the loop then ends)."""
        raise NotImplementedError

    def stop_job(self) -> list[int]:
        """Stops what is left of the job; returns the agents' non-zero exit statuses."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stops the cluster's own parts (before every process left is ended)."""

    def first_step(self, generation: int) -> float | None:
        """When (Unix time) a trainer first stepped in `generation`; None when not (yet) known.

        The timeline's "first step at the new size" (docs/elastic.md §4.5); a subclass that
        cannot read its trainers' reports says None and the timeline stops at the world.
        """
        return None

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> int:
        """The whole demo; 0 when everything it promises held."""
        try:
            self._prepare()
            reference, train_samples = self._reference()
            summary = self._play(reference, train_samples)
        finally:
            self.shutdown()
            self.procs.close(grace_s=10.0)
        for line in summary.lines():
            self.say("  " + line)
        self.say(f"report: {self.opts.out / 'report.png'}   logs: {self.work}")
        (self.opts.out / "summary.txt").write_text("\n".join(summary.lines()) + "\n")
        return 0 if summary.ok else 1

    def _prepare(self) -> None:
        if self.work.exists():
            if not (self.work / MARKER).exists():
                raise DemoError(f"{self.work} exists and is not a demo folder: not touching it")
            shutil.rmtree(self.work)
        for sub in ("pods", "ledger", "store"):
            (self.work / sub).mkdir(parents=True)
        (self.work / MARKER).touch()

    def trainer(self, *extra: str, python: str = sys.executable) -> list[str]:
        """The training command (the elastic digits example)."""
        o = self.opts
        return [
            python, "-m", "examples.train_digits_elastic", "--epochs", str(o.epochs),
            "--global-batch", str(o.global_batch), "--seed", str(o.seed), *extra,
        ]  # fmt: skip

    def job_args(self) -> list[str]:
        """What the job's trainers get beyond :meth:`trainer`'s arguments."""
        return [
            "--sample-sleep", str(self.opts.sample_sleep), "--log-every", "5",
            "--result", str(self.result), "--step-gate", str(self.gate.path),
        ]  # fmt: skip

    @staticmethod
    def env() -> dict[str, str]:
        """The environment of every process the demo starts."""
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
            "GLOG_minloglevel": "2",  # keep Paddle's C++ INFO lines out of the logs
            "PYTHONWARNINGS": "ignore",
        }

    def _reference(self) -> tuple[float, int]:
        """The one-process run of the same seed that the ending compares with."""
        self.say(f"EDL demo: one-process reference run of the same job ({self.opts.epochs} epochs, "
                 f"seed {self.opts.seed}) for the summary ...")  # fmt: skip
        result = self.work / "reference.json"
        log = self.work / "reference.log"
        started = self.now()
        proc = self.procs.spawn(self.trainer("--result", str(result)), log, self.env(), REPO_ROOT)
        while proc.poll() is None:
            time.sleep(0.1)
        if proc.returncode != 0 or not result.exists():
            raise DemoError(f"the reference run failed:\n{log.read_text()[-3000:]}")
        figures = json.loads(result.read_text())
        self.say(f"  accuracy {figures['accuracy']:.4f} after {self.now() - started:.1f} s")
        return float(figures["accuracy"]), int(figures["train_samples"])

    def _play(self, reference: float, train_samples: int) -> Summary:
        o = self.opts
        stage = self.start()
        story = Story(stage, o.dwell_steps)
        self.log.act(self.now(), story.headline)
        total_steps = o.epochs * -(-train_samples // o.global_batch)
        gate = StoryGate(self.gate, total_steps, o.dwell_steps, o.global_batch)
        self.launch()
        telemetry = self.telemetry()
        total = o.epochs * train_samples
        timeline: list[TimelinePoint] = []
        view: View = LiveView(self.out) if o.live else PlainView(self.out)
        deadline = self.now() + o.timeout_s
        finished_at: float | None = None
        try:
            while True:
                t = self.now()
                if t > deadline:
                    raise DemoError(f"the job did not finish within {o.timeout_s:.0f} s; logs in "
                                    f"{self.work}")  # fmt: skip
                training = telemetry.observe(t, self.sync_agents())
                self._note_world(telemetry, training, t)
                self._note_first_step()
                if training.world.finished:
                    finished_at = finished_at or t
                else:
                    act = story.advance(training, stage)
                    if act is not None:
                        self.log.act(t, act.headline)
                    gate.update(training, story.done and training.world.members == stage.slots,
                                story.done)  # fmt: skip
                    self.react(t)
                    self._note_sizer(t)
                progress = 1.0 if training.world.finished else min(1.0, training.samples / total)
                status = Status(
                    t, self.title, story.headline, story.played, story.total, training, progress,
                    self.cluster_state(), self._sizer, telemetry.last_pause, self.log.events,
                )  # fmt: skip
                view.show(status, self.log.take())
                timeline.append(TimelinePoint.of(status))
                if finished_at is not None and self.drained(t - finished_at):
                    break
                time.sleep(o.tick_s)
        finally:
            view.close()
        crashes = self.stop_job()
        self.say(f"The job finished after {self.now():.0f} s. Summary:")
        accuracy = json.loads(self.result.read_text())["accuracy"] if self.result.exists() else None
        summary = Summary.build(
            self.work / "ledger", o.epochs, train_samples, telemetry.sizes,
            sorted([*telemetry.rescales, *telemetry.untrained], key=lambda r: r.t),
            accuracy, reference,
        )  # fmt: skip
        summary.story_complete = story.done
        summary.crashes = len(crashes)
        write_png(
            self.opts.out / "report.png", timeline, telemetry.rescales, self.log.acts, self.title
        )
        return summary

    def telemetry(self) -> JobTelemetry:
        """Reads the job (the world record is where the membership keeps it)."""
        return JobTelemetry(local_world(self.work / "store", self.job.name), self.opts.global_batch)

    def _note_world(self, telemetry: JobTelemetry, training: Training, t: float) -> None:
        world = training.world
        if world.members and world.generation != self._generation:
            self._generation = world.generation
            r = telemetry.changes[-1] if telemetry.changes else None
            change = (
                f"{r.before} -> {r.after} workers"
                if r is not None and r.generation == world.generation
                else f"{world.members} worker(s)"
            )
            self.log.add(t, f"agents: generation {world.generation}, {change}")
            self._awaiting_step = (world.generation, world.members)

    def _note_first_step(self) -> None:
        """Logs, at the time it happened, the first step of the newest world, once trained."""
        if self._awaiting_step is None:
            return
        generation, workers = self._awaiting_step
        at = self.first_step(generation)
        if at is not None:
            self._awaiting_step = None
            self.log.add(
                at - self._t0_wall,
                f"agents: first step at generation {generation} ({workers} worker(s))",
            )

    def _note_sizer(self, t: float) -> None:
        now = self.sizer()
        last = self._sizer
        if now is None:
            return
        if last is None or (now.desired, now.limited_by) != (last.desired, last.limited_by):
            self.log.add(t, f"sizer: {now.message}")
        self._sizer = now


def sizer_of(plan: dict[str, object] | None) -> Sizer | None:
    """The sizer's decision for the job from ``/debug/sizing``'s entry."""
    if plan is None:
        return None
    return Sizer(int(str(plan["desired"])), str(plan["limitedBy"]), str(plan["message"]))


class EmbeddedDemo(Demo):
    """``make demo``: a simulated node, the real adapter, the HPA model, local agents."""

    title = "on a simulated 3-slot node"

    def __init__(self, opts: DemoOptions, out: TextIO = sys.stdout) -> None:
        super().__init__(opts, out)
        self.cluster = SimulatedCluster(self.job)
        self.files = ClusterFiles(self.work / "capacity.yaml", self.work / "pods.yaml")
        self.hpa = HpaLoop(sync_period=1.0)
        self.adapter = DemoAdapter(
            self.procs,
            AdapterFiles(
                self.files.pods, self.files.capacity, self.work / "catalogue.yaml",
                self.work / "edl-adapter.log", self.work / "adapter-certs",
            ),
            free_port(),
        )  # fmt: skip
        self.kubelet = LocalKubelet(
            self.procs,
            AgentSettings(
                self.work / "store", self.work / "ledger", self.work / "pods",
                self.trainer(*self.job_args()), env=AGENT_ENV,
            ),
            self.job.name,
            self.env(),
        )  # fmt: skip

    def start(self) -> Stage:
        """The simulated cluster (nothing runs yet)."""
        return self.cluster

    def launch(self) -> None:
        """The batch job's pods are bound, the adapter starts on the cluster's files, then the
        first worker's agent starts."""
        self.cluster.reconcile()
        self.files.write(self.cluster)
        write_catalogue(self.work / "catalogue.yaml", window_s=10)
        self.adapter.start()
        a = self.adapter
        self.say(f"  edl-adapter (sizer on, static capacity): {a.url}; the HPA's read:")
        self.say(f"    kubectl get --raw '{a.external_path(self.job)}' --server "
                 f"{a.url} --insecure-skip-tls-verify --token x")  # fmt: skip
        self.say(f"    curl -sk {a.url}/debug/sizing   # the sizer's plan and why")
        self.say(f"  HPA: {HPA_FILE.relative_to(REPO_ROOT)}, its model syncing every second")
        self.say(f"  logs, ledger and files in {self.work}; Ctrl-C stops everything")
        self.say("")
        self._sync_pods(self.now())

    def sync_agents(self) -> dict[str, tuple[str, int, Path]]:
        """The kubelet's sync, then its agents."""
        self._sync_pods(self.now())
        return {n: ("127.0.0.1", a.port, a.log) for n, a in self.kubelet.agents.items()}

    def react(self, t: float) -> None:
        """The HPA (when due), the ReplicaSet and scheduler, the kubelet, the files."""
        if self.hpa.due(t):
            c = self.cluster
            decision = self.hpa.sync(t, c.replicas, self.adapter.desired_replicas(self.job))
            if decision.desired_replicas != c.replicas:
                self.log.add(
                    t,
                    f"HPA: desired_replicas says {decision.metric_replicas}; scaled "
                    f"{c.replicas} -> {decision.desired_replicas}",
                )
                c.replicas = decision.desired_replicas
        self.cluster.reconcile()
        self._sync_pods(t)
        self.files.write(self.cluster)

    def sizer(self) -> Sizer | None:
        """From the adapter's ``/debug/sizing``."""
        return sizer_of(self.adapter.sizing_plan(self.job))

    def cluster_state(self) -> ClusterState:
        """The simulated cluster and the HPA model."""
        c, decision = self.cluster, self.hpa.last
        desired = decision.desired_replicas if decision else None
        return cluster_state(c.pod_views(), c.slots, c.replicas, self.hpa.last_read, desired)

    def drained(self, since_finish: float) -> bool:
        """The agents exit by themselves (``--on-finished exit``); a minute at most."""
        return not self.kubelet.agents or since_finish > 60

    def first_step(self, generation: int) -> float | None:
        """The earliest ``first_step`` any trainer reported for `generation` (each pod's
        control folder, `agent.protocol.control.Timings`)."""
        found = []
        for path in (self.work / "pods").glob(f"*/control/timings-g{generation}.json"):
            try:
                at = Timings.from_json(path.read_text(encoding="utf-8")).first_step
            except (OSError, ProtocolError):
                continue
            if at is not None:
                found.append(at)
        return min(found) if found else None

    def stop_job(self) -> list[int]:
        """Stops any agent left; the statuses of those that failed."""
        self.kubelet.stop_all(grace_s=10.0)
        return [rc for _, rc in self.kubelet.exits if rc != 0]

    def _sync_pods(self, t: float) -> None:
        before = set(self.kubelet.agents)
        exits = len(self.kubelet.exits)
        self.kubelet.sync(self.cluster)
        for name in sorted(set(self.kubelet.agents) - before):
            self.log.add(t, f"kubelet: started edl-agent for pod {name}")
        for name, rc in self.kubelet.exits[exits:]:
            how = "left" if rc == 0 else f"exited with status {rc}"
            self.log.add(t, f"kubelet: pod {name}'s agent {how}")
