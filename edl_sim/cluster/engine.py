"""The discrete-event loop: submissions, service steps, pods starting, jobs finishing, policies.

Events are processed in time order; at one instant the cluster's own events (a pod Running,
a job done) come before submissions and service steps, and those before the policies'
loops. After every event the instant is *settled*: the policy reacts, the scheduler binds
what fits, and every job whose Running pods changed re-forms its world (a rescale, with its
pause). Between events every job trains at a constant rate, so its completion is predicted
exactly and re-predicted whenever its world changes.
"""

from __future__ import annotations

import heapq
import math
import time as wallclock
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from edl_sim.cluster.inputs import BackgroundStep, SimulationError, Workload
from edl_sim.cluster.jobs import JobRun, PauseModel
from edl_sim.cluster.policy import Policy
from edl_sim.cluster.sim_cluster import SimCluster, SimPod, build_nodes, deletion_order
from edl_sizing import Resources

_CLUSTER, _ARRIVAL, _POLICY = 0, 1, 2
_DONE_EPS = 1e-9


@dataclass(frozen=True)
class SimSettings:
    """How the simulated cluster behaves (the same for every policy of a comparison)."""

    seed: int = 0
    """Seeds the rescale pauses drawn for each job."""
    start_delay: float = 5.0
    """Seconds from binding to Running (image present, agent up)."""
    pauses: PauseModel = field(default_factory=PauseModel)
    placement: str = "spread"
    preemption: bool = False
    max_time: float | None = None
    """Stop here even if jobs are left (they are reported unfinished). None: run until every
    job has finished; past :func:`horizon_bound` the run is an error naming the jobs left."""
    until: float = 0.0
    """Keep simulating at least until here (the end of a utilisation window)."""


@dataclass(frozen=True)
class JobOutcome:
    """One job's figures."""

    name: str
    submit: float
    started: float | None
    finished: float | None
    rescales: int
    lost_s: float
    requested: int
    worlds: tuple[tuple[float, int], ...] = ()
    """(time, world size) at each change of its world (0: waiting, not training)."""

    @property
    def pending(self) -> float | None:
        """Seconds from submission to the first training step."""
        return None if self.started is None else self.started - self.submit

    @property
    def jct(self) -> float | None:
        """Job completion time: submission to the last sample."""
        return None if self.finished is None else self.finished - self.submit


@dataclass(frozen=True)
class ClusterSnapshot:
    """The cluster from ``time`` until the next sample."""

    time: float
    cpu: float
    memory: float
    gpu: float
    """Requests of Running pods."""
    workers: int
    """Running worker pods."""
    service_pods: int
    """Service pods wanted (the background's count)."""
    service_running: int = 0
    """Service pods Running (fewer than wanted while some wait for room)."""


@dataclass(frozen=True)
class SimResult:
    """Everything a report needs from one run."""

    policy: str
    jobs: tuple[JobOutcome, ...]
    series: tuple[ClusterSnapshot, ...]
    end: float
    allocatable: tuple[float, float, float]
    """CPU, memory, GPU of all nodes."""
    service_waits: tuple[float, ...]
    """Seconds each service pod waited to be bound (still waiting: until its end)."""
    preempted: int
    wall_s: float
    decisions: int
    """Policy decisions made (sizer rounds, HPA syncs, autoscaler loops)."""


HORIZON_SLACK = 4.0
"""The default bound's multiple of running every job alone at its slowest size."""


def horizon_bound(workload: Workload) -> float:
    """How long a run may take before jobs left unfinished are an error (seconds).

    After the last arrival (a job or a service step), :data:`HORIZON_SLACK` times the time
    every job would take run alone, one after another, at its slowest size between its
    minimum and maximum of workers: a policy that keeps the cluster working finishes well
    within it, so a job still running past it is starved (or can never fit), not slow.
    """
    last = max(
        [j.submit for j in workload.jobs] + [s.time for s in workload.background], default=0.0
    )
    alone = 0.0
    for spec in workload.jobs:
        curve = workload.curves[spec.curve]
        sizes = range(max(1, spec.min_workers), max(1, spec.min_workers, spec.max_workers) + 1)
        slowest = min((curve.throughput(n) for n in sizes), default=0.0)
        alone += spec.work_samples / slowest if slowest > 0 else 0.0
    return last + HORIZON_SLACK * alone + 86400.0


class Simulation:
    """One policy on one workload."""

    def __init__(
        self,
        workload: Workload,
        policy: Policy,
        settings: SimSettings | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings or SimSettings()
        self.workload = workload
        self.policy = policy
        groups = [(g.name, g.count, g.allocatable) for g in workload.nodes]
        self._cluster: SimCluster[JobRun] = SimCluster(
            build_nodes(groups), self.settings.placement, self.settings.preemption
        )
        self._now = 0.0
        self._heap: list[tuple[float, int, int, Callable[[], None]]] = []
        self._seq = 0
        self._active: dict[str, JobRun] = {}
        self._runs: list[JobRun] = []
        self._dirty: set[str] = set()
        self._services: dict[str, list[SimPod[JobRun]]] = {}
        self._service_count = 0
        self._service_created = 0
        self._service_waits: list[float] = []
        self._series: list[ClusterSnapshot] = []
        self._preempted = 0
        self._finished = 0
        self._progress = progress
        self._last_progress = wallclock.monotonic()
        self.decisions = 0

    # -- the view policies get ------------------------------------------------------------

    @property
    def now(self) -> float:
        """Simulated seconds."""
        return self._now

    @property
    def cluster(self) -> SimCluster[JobRun]:
        """Nodes and pods."""
        return self._cluster

    @property
    def active(self) -> Mapping[str, JobRun]:
        """Submitted, unfinished jobs by key."""
        return self._active

    def at(self, time: float, callback: Callable[[], None]) -> None:
        """A policy callback at ``time``."""
        self._push(time, _POLICY, callback)

    def scale(self, job: JobRun, replicas: int) -> None:
        """Set the Deployment's replicas and reconcile its pods."""
        job.replicas = max(0, replicas)
        self._reconcile(job)

    def admit(self, job: JobRun, workers: int) -> bool:
        """Gang admission: all ``workers`` pods bound now, or none created."""
        nodes = self._cluster.plan_gang(job.spec.worker, workers, job)
        if nodes is None:
            return False
        job.replicas = workers
        for node in nodes:
            pod = self._new_worker(job)
            self._cluster.bind(pod, node, self._now)
            self._bound(pod)
        return True

    def decided(self) -> None:
        """Count one policy decision."""
        self.decisions += 1

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Simulate until every job is done (or ``max_time``).

        Raises:
            SimulationError: without ``max_time``, jobs were left past :func:`horizon_bound`.
        """
        started = wallclock.monotonic()
        for spec in self.workload.jobs:
            low, high = self.policy.bounds(spec)
            curve = self.workload.curves[spec.curve]
            run = JobRun(spec, curve, low, high, self.settings.pauses, self.settings.seed)
            self._runs.append(run)
            self._push(spec.submit, _ARRIVAL, partial(self._submit, run))
        for step in self.workload.background:
            self._push(step.time, _ARRIVAL, partial(self._service_step, step))
        self.policy.start(self)
        self._record()
        total = len(self._runs)
        until = self.settings.until
        limit = self.settings.max_time
        bound = horizon_bound(self.workload) if limit is None else limit
        while self._heap and (self._finished < total or self._heap[0][0] <= until):
            t, order = self._heap[0][0], self._heap[0][1]
            if t > bound:
                break
            self._now = t
            while self._heap and self._heap[0][0] == t and self._heap[0][1] == order:
                heapq.heappop(self._heap)[3]()
                self._settle()
            self._update_worlds()
            self._report_progress(total)
        end = self._now
        left = [r.spec for r in self._runs if r.finished_at is None]
        if limit is None and left:
            named = ", ".join(f"{s.name} (submitted at {s.submit:.0f} s)" for s in left[:5])
            more = f" and {len(left) - 5} more" if len(left) > 5 else ""
            raise SimulationError(
                f"{self.policy.name} left {len(left)} of {total} jobs unfinished after "
                f"{end:.0f} s of simulated time (the bound: {HORIZON_SLACK:g}x every job run "
                f"alone at its slowest size, after the last arrival): {named}{more}; "
                "--max-time compares the policies within a horizon instead"
            )
        for pods in self._services.values():
            self._service_waits.extend(end - p.created for p in pods if p.node is None)
        jobs = tuple(
            JobOutcome(
                r.spec.name, r.spec.submit, r.started_at, r.finished_at,
                r.rescales, r.lost_s, r.spec.requested, tuple(r.worlds),
            )
            for r in self._runs
        )  # fmt: skip
        a = self._cluster.allocatable
        return SimResult(
            self.policy.name, jobs, tuple(self._series), end, (a.cpu, a.memory, a.gpu),
            tuple(self._service_waits), self._preempted,
            wallclock.monotonic() - started, self.decisions,
        )  # fmt: skip

    def _push(self, time: float, order: int, callback: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, order, self._seq, callback))

    def _report_progress(self, total: int) -> None:
        if self._progress is None:
            return
        tick = wallclock.monotonic()
        if tick - self._last_progress >= 5.0:
            self._last_progress = tick
            self._progress(
                f"{self.policy.name}: t={self._now:.0f}s, {self._finished}/{total} jobs done, "
                f"{len(self._active)} running or waiting"
            )

    # -- jobs -----------------------------------------------------------------------------

    def _submit(self, job: JobRun) -> None:
        self._active[job.key] = job
        self.policy.submitted(job)

    def _new_worker(self, job: JobRun) -> SimPod[JobRun]:
        job.created += 1
        pod = self._cluster.create_pod(
            f"{job.spec.name}-{job.created}", job.spec.worker, job.spec.priority, self._now, job=job
        )
        job.pods[pod.name] = pod
        return pod

    def _reconcile(self, job: JobRun) -> None:
        missing = job.replicas - len(job.pods)
        for _ in range(missing):
            self._new_worker(job)
        if missing < 0:
            for pod in deletion_order(job.pods.values())[:-missing]:
                self._remove(pod)

    def _remove(self, pod: SimPod[JobRun]) -> None:
        job = pod.job
        was_running = pod.running
        self._cluster.delete(pod)
        if job is not None:
            del job.pods[pod.name]
            if was_running:
                job.running -= 1
                self._mark(job)
        elif pod.service is not None and pod.node is None:
            self._service_waits.append(self._now - pod.created)

    def _mark(self, job: JobRun) -> None:
        job.dirty = True
        self._dirty.add(job.key)

    def _bound(self, pod: SimPod[JobRun]) -> None:
        if pod.service is not None:
            self._service_waits.append(self._now - pod.created)
        delay = self.settings.start_delay
        self._push(self._now + delay, _CLUSTER, lambda: self._start_pod(pod))

    def _start_pod(self, pod: SimPod[JobRun]) -> None:
        if pod.name not in self._cluster.pods or pod.running:
            return
        self._cluster.mark_running(pod)
        if pod.job is not None:
            pod.job.running += 1
            self._mark(pod.job)

    def _completion(self, job: JobRun, version: int) -> None:
        if version != job.version or job.finished_at is not None:
            return
        job.advance(self._now)
        if job.remaining > _DONE_EPS * job.spec.work_samples:
            self._predict(job)
            return
        job.finished_at = self._now
        job.training = False
        job.replicas = 0
        for pod in list(job.pods.values()):
            self._remove(pod)
        job.dirty = False
        self._dirty.discard(job.key)
        del self._active[job.key]
        self._finished += 1
        self.policy.finished(job)

    def _predict(self, job: JobRun) -> None:
        done = job.completion_time(self._now)
        if done is not None:
            version = job.version
            self._push(done, _CLUSTER, lambda: self._completion(job, version))

    # -- background service ---------------------------------------------------------------

    def _service_step(self, step: BackgroundStep) -> None:
        name = step.service
        pods = self._services.setdefault(name, [])
        self._service_count += step.pods - len(pods)
        while len(pods) < step.pods:
            pods.append(self._new_service_pod(name, step.requests, step.priority))
        if len(pods) > step.pods:
            gone = deletion_order(pods)[: len(pods) - step.pods]
            for pod in gone:
                self._remove(pod)
            keep = {id(p) for p in gone}
            pods[:] = [p for p in pods if id(p) not in keep]

    # -- settling an instant --------------------------------------------------------------

    def _settle(self) -> None:
        """The policy reacts and the scheduler binds, until nothing changes."""
        for _ in range(1000):
            changed = self.policy.settle()
            bound, evicted = self._cluster.schedule(self._now)
            for victim in evicted:
                self._preempted += victim.job is not None
                self._evicted(victim)
            for pod in bound:
                self._bound(pod)
            if not (changed or bound or evicted):
                break
        else:
            raise SimulationError(f"t={self._now}: the cluster did not settle (a bug)")

    def _update_worlds(self) -> None:
        """Every job whose Running pods changed this instant re-forms its world once."""
        for key in sorted(self._dirty):
            job = self._active.get(key)
            if job is None or not job.dirty:
                continue
            job.update_world(self._now)
            self._predict(job)
        self._dirty.clear()
        self._record()

    def _evicted(self, pod: SimPod[JobRun]) -> None:
        """A preempted pod: its owner (Deployment or service) replaces it."""
        job = pod.job
        if job is not None:
            del job.pods[pod.name]
            if pod.running:
                job.running -= 1
                self._mark(job)
            self._reconcile(job)
            return
        if pod.service is not None:
            pods = self._services[pod.service]
            pods[:] = [p for p in pods if p is not pod]
            pods.append(self._new_service_pod(pod.service, pod.requests, pod.priority))

    def _new_service_pod(self, service: str, requests: Resources, priority: int) -> SimPod[JobRun]:
        self._service_created += 1
        name = f"{service}-{self._service_created}"
        return self._cluster.create_pod(name, requests, priority, self._now, service=service)

    def _record(self) -> None:
        t = self._cluster.running
        sample = ClusterSnapshot(
            self._now, t.cpu, t.memory, t.gpu, t.workers, self._service_count, t.services
        )
        if self._series:
            last = self._series[-1]
            if (last.cpu, last.gpu, last.workers, last.service_pods, last.service_running) == (
                sample.cpu, sample.gpu, sample.workers, sample.service_pods, t.services,
            ):  # fmt: skip
                return
            if math.isclose(last.time, sample.time):
                self._series[-1] = sample
                return
        self._series.append(sample)
