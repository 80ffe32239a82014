"""One run of the embedded demo: the loop, tick by tick, then the ending.

Each tick (half a second): the kubelet starts and stops agents for the cluster's pods; the
telemetry reads the world and the agents; the story plays its next act when its condition
holds; the HPA syncs on the adapter's ``desired_replicas`` when a sync period has passed and
sets the Deployment's replicas; the ReplicaSet and the scheduler react; the cluster files
are rewritten for the adapter; the view shows it all.
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

from examples.demo.cluster import ClusterFiles, JobSpec, SimulatedCluster
from examples.demo.control import HPA_FILE, AdapterFiles, DemoAdapter, HpaLoop, write_catalogue
from examples.demo.kubelet import AgentSettings, LocalKubelet
from examples.demo.probe import free_port
from examples.demo.processes import ProcessGroup
from examples.demo.report import Sample, Summary, write_png
from examples.demo.story import Story
from examples.demo.telemetry import JobTelemetry, Training
from examples.demo.view import LiveView, PlainView, Sizer, Status, View

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = ".edl-demo"


class DemoError(RuntimeError):
    """The demo could not run to its end; the message says why (and where the logs are)."""


@dataclass(frozen=True)
class DemoOptions:
    """What `python -m examples.demo` takes."""

    epochs: int = 30
    dwell_steps: int = 60
    """Steps the job trains in a world before the story's next act."""
    sample_sleep: float = 0.002
    """Simulated compute per sample (s): a slot is a device, so 3 workers go ~3x faster."""
    global_batch: int = 64
    seed: int = 0
    out: Path = REPO_ROOT / "out" / "demo"
    live: bool = False
    timeout_s: float = 600.0
    tick_s: float = 0.5


@dataclass
class _Log:
    events: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    acts: list[tuple[float, str]] = field(default_factory=list)

    def add(self, t: float, text: str) -> None:
        line = f"{t:6.1f} s  {text}"
        self.events.append(line)
        self.new.append(line)

    def take(self) -> list[str]:
        out, self.new = self.new, []
        return out


class Demo:
    """Builds the pieces, runs the story to the end of the job, and writes the report."""

    def __init__(self, opts: DemoOptions, out: TextIO = sys.stdout) -> None:
        self.opts = opts
        self.out = out
        self.work = opts.out / "work"
        self.job = JobSpec()
        self.procs = ProcessGroup()
        self.log = _Log()
        self._t0 = time.monotonic()
        self._generation = 0
        self.stopping = False
        """Set once a stop was asked for (Ctrl-C)."""

    def now(self) -> float:
        """Seconds since the demo began."""
        return time.monotonic() - self._t0

    def say(self, text: str) -> None:
        """A line before or after the live part."""
        self.out.write(text + "\n")
        self.out.flush()

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> int:
        """The whole demo; 0 when everything it promises held."""
        try:
            self._prepare()
            reference, train_samples = self._reference()
            summary = self._story(reference, train_samples)
        finally:
            self.procs.close(grace_s=10.0)
        for line in summary.lines():
            self.say("  " + line)
        self.say(f"report: {self.opts.out / 'report.png'}   logs: {self.work / 'pods'}")
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

    def _trainer(self, *extra: str) -> list[str]:
        o = self.opts
        return [
            sys.executable, "-m", "examples.train_digits_elastic", "--epochs", str(o.epochs),
            "--global-batch", str(o.global_batch), "--seed", str(o.seed), *extra,
        ]  # fmt: skip

    def _env(self) -> dict[str, str]:
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
        proc = self.procs.spawn(self._trainer("--result", str(result)), log, self._env(), REPO_ROOT)
        while proc.poll() is None:
            time.sleep(0.1)
        if proc.returncode != 0 or not result.exists():
            raise DemoError(f"the reference run failed:\n{log.read_text()[-3000:]}")
        figures = json.loads(result.read_text())
        self.say(f"  accuracy {figures['accuracy']:.4f} after {self.now() - started:.1f} s")
        return float(figures["accuracy"]), int(figures["train_samples"])

    def _story(self, reference: float, train_samples: int) -> Summary:
        o = self.opts
        cluster = SimulatedCluster(self.job)
        story = Story(cluster, o.dwell_steps)
        files = ClusterFiles(self.work / "capacity.yaml", self.work / "pods.yaml")
        files.write(cluster)
        write_catalogue(self.work / "catalogue.yaml", window_s=10)
        adapter = DemoAdapter(
            self.procs,
            AdapterFiles(
                files.pods, files.capacity, self.work / "catalogue.yaml",
                self.work / "edl-adapter.log", self.work / "adapter-certs",
            ),
            free_port(),
        )  # fmt: skip
        adapter.start()
        hpa = HpaLoop(sync_period=1.0)
        self._intro(adapter)
        result = self.work / "result.json"
        kubelet = LocalKubelet(
            self.procs,
            AgentSettings(
                self.work / "store", self.work / "ledger", self.work / "pods",
                self._trainer("--sample-sleep", str(o.sample_sleep), "--log-every", "5",
                              "--result", str(result)),
                # joiners started together register when their trainers have imported Paddle,
                # seconds apart on a loaded machine: a longer debounce makes them one world
                env={"EDL_DEBOUNCE": "3", "EDL_MAX_DEBOUNCE": "10"},
            ),
            self.job.name,
            self._env(),
        )  # fmt: skip
        telemetry = JobTelemetry(self.work / "store", self.job.name, o.global_batch)
        total = o.epochs * train_samples
        view: View = LiveView(self.out) if o.live else PlainView(self.out)
        self.log.add(self.now(), story.headline)
        self.log.acts.append((self.now(), story.headline))
        timeline: list[Sample] = []
        sizer: Sizer | None = None
        deadline = self.now() + o.timeout_s
        finished_at: float | None = None
        try:
            while True:
                t = self.now()
                if t > deadline:
                    raise DemoError(f"the job did not finish within {o.timeout_s:.0f} s; logs in "
                                    f"{self.work}")  # fmt: skip
                self._sync_pods(kubelet, cluster, t)
                agents = {name: (a.port, a.log) for name, a in kubelet.agents.items()}
                training = telemetry.observe(t, agents)
                self._note_world(telemetry, training, t)
                if training.world.finished:
                    finished_at = finished_at or t
                    if not kubelet.agents or t - finished_at > 60:
                        break
                else:
                    act = story.advance(training, cluster)
                    if act is not None:
                        self.log.add(t, act.headline)
                        self.log.acts.append((t, act.headline))
                    if hpa.due(t):
                        self._hpa_sync(hpa, adapter, cluster, t)
                    sizer = self._sizer(adapter, sizer, t)
                    cluster.reconcile()
                    self._sync_pods(kubelet, cluster, t)
                    files.write(cluster)
                status = self._status(story, training, total, cluster, hpa, sizer, telemetry, t)
                view.show(status, self.log.take())
                timeline.append(self._sample(status, cluster))
                time.sleep(o.tick_s)
        finally:
            view.close()
        kubelet.stop_all(grace_s=10.0)
        crashes = sum(1 for _, rc in kubelet.exits if rc != 0)
        accuracy = json.loads(result.read_text())["accuracy"] if result.exists() else None
        summary = Summary.build(
            self.work / "ledger", o.epochs, train_samples, telemetry.sizes, telemetry.rescales,
            accuracy, reference,
        )  # fmt: skip
        summary.story_complete = story.done
        summary.crashes = crashes
        self.say(f"The job finished after {self.now():.0f} s. Summary:")
        write_png(self.opts.out / "report.png", timeline, telemetry.rescales, self.log.acts)
        return summary

    # -- pieces of a tick ---------------------------------------------------------------------

    def _intro(self, adapter: DemoAdapter) -> None:
        self.say(f"  edl-adapter (sizer on, static capacity): {adapter.url}; the HPA's read:")
        self.say(f"    kubectl get --raw '{adapter.external_path(self.job)}' --server "
                 f"{adapter.url} --insecure-skip-tls-verify --token x")  # fmt: skip
        self.say(f"    curl -sk {adapter.url}/debug/sizing   # the sizer's plan and why")
        self.say(
            f"  HPA: {HPA_FILE.relative_to(REPO_ROOT)}, its model stepping on that API every second"
        )
        self.say(f"  logs, ledger and files in {self.work}; Ctrl-C stops everything")
        self.say("")

    def _sync_pods(self, kubelet: LocalKubelet, cluster: SimulatedCluster, t: float) -> None:
        before = set(kubelet.agents)
        exits = len(kubelet.exits)
        kubelet.sync(cluster)
        for name in sorted(set(kubelet.agents) - before):
            self.log.add(t, f"kubelet: started edl-agent for pod {name}")
        for name, rc in kubelet.exits[exits:]:
            how = "left" if rc == 0 else f"exited with status {rc}"
            self.log.add(t, f"kubelet: pod {name}'s agent {how}")

    def _note_world(self, telemetry: JobTelemetry, training: Training, t: float) -> None:
        world = training.world
        if world.members and world.generation != self._generation:
            self._generation = world.generation
            r = telemetry.rescales[-1] if telemetry.rescales else None
            change = (
                f"{r.before} -> {r.after} workers"
                if r is not None and r.generation == world.generation
                else f"{world.members} worker(s)"
            )
            self.log.add(t, f"agents: generation {world.generation}, {change}")

    def _hpa_sync(
        self, hpa: HpaLoop, adapter: DemoAdapter, cluster: SimulatedCluster, t: float
    ) -> None:
        decision = hpa.sync(t, cluster.replicas, adapter.desired_replicas(self.job))
        if decision.desired_replicas != cluster.replicas:
            self.log.add(t, f"HPA: desired_replicas says {decision.metric_replicas}; scaled "
                            f"{cluster.replicas} -> {decision.desired_replicas}")  # fmt: skip
            cluster.replicas = decision.desired_replicas

    def _sizer(self, adapter: DemoAdapter, last: Sizer | None, t: float) -> Sizer | None:
        plan = adapter.sizing_plan(self.job)
        if plan is None:
            return last
        now = Sizer(int(plan["desired"]), str(plan["limitedBy"]), str(plan["message"]))
        if last is None or (now.desired, now.limited_by) != (last.desired, last.limited_by):
            self.log.add(t, f"sizer: {now.message}")
        return now

    def _status(
        self, story: Story, training: Training, total: int, cluster: SimulatedCluster,
        hpa: HpaLoop, sizer: Sizer | None, telemetry: JobTelemetry, t: float,
    ) -> Status:  # fmt: skip
        decision = hpa.last
        return Status(
            t=t, headline=story.headline, act=story.played, acts=story.total,
            training=training,
            progress=1.0 if training.world.finished else min(1.0, training.samples / total),
            replicas=cluster.replicas,
            hpa_read=hpa.last_read,
            hpa_desired=decision.desired_replicas if decision else None,
            workers=cluster.worker_states(),
            slots=cluster.slot_map(), free_slots=cluster.free_slots(), sizer=sizer,
            last_pause=telemetry.last_pause, events=self.log.events,
        )  # fmt: skip

    def _sample(self, s: Status, cluster: SimulatedCluster) -> Sample:
        bound = [p for p in cluster.pods if p.node is not None]
        return Sample(
            t=s.t, samples_per_second=s.training.samples_per_second,
            world=s.training.world.members, replicas=s.replicas,
            sizer_desired=s.sizer.desired if s.sizer else None, free_slots=s.free_slots,
            trainer_slots=sum(p.cpu for p in bound if p.is_worker),
            other_slots=sum(p.cpu for p in bound if not p.is_worker),
            pending_priority=sum(1 for p in cluster.pods if p.node is None and p.priority > 0),
            loss=s.training.loss,
        )  # fmt: skip
