"""``edl``: the adapter's sizer (:func:`edl_sizing.decide`) through each job's HPA.

What the adapter does, on the simulated cluster, through the adapter's own code for the round
(:mod:`edl_sizing.sizing_round`: the history merge, the request rule, the rescale budget's
window, the folding of measurements, the fallback plan):

* every ``sizing_interval`` one :func:`~edl_sizing.sizing_round.run_round` over the nodes,
  every non-terminated pod (bound or Pending; service pods with their priority) and every
  job (its Deployment's replicas, min/max workers, priority, arrival, the creation time of
  its newest worker as ``last_rescale``, the measured rescale pause and throughput per size
  from the shared :class:`~edl_sizing.SizeHistory`);
* every ``history_interval`` the jobs' measurements are folded into that history, as the
  adapter's observer does: a throughput at size n, with the nodes its workers span, only
  over a world unchanged (and not paused) for ``observe_window``; the new rescale pauses'
  mean from the agent's histogram; its progress (samples trained over its work, the agent's
  ``edl_job_progress_ratio``) and, over a world unchanged since the last fold, its planned
  samples as its throughput over its rate of progress;
  with ``class_history`` each job carries its curve's name as its class label
  (``edl.paddlepaddle.org/class``), so it is also recorded under its class and a new job of
  a class measured before starts from the class's sizes;
* each job's request (``requested_workers``, the Deployment's replicas at creation, as the
  ``requested-workers`` annotation gives it) and its rescales in the last hour (counted from
  its worlds, as the adapter counts them from the history) go to the round;
* each job's HPA (``manifests/examples/digits-trainer/hpa-sizing.yaml``, packaged as
  ``hpa-sizing.yaml``, a test keeps the two equal: External ``desired_replicas``,
  AverageValue 1, tolerance 0, no stabilisation windows) reads the latest plan's value for
  its job; before the first plan that includes the job, the metric has no item and the HPA
  keeps its scale (as the real HPA does with an empty External answer).
"""

from __future__ import annotations

from edl_sim.cluster.jobs import NAMESPACE, JobRun
from edl_sim.cluster.policies.hpa_loop import HpaPolicy, one_metric, read_manifest
from edl_sim.cluster.policy import PolicySettings, SimulationView
from edl_sim.hpa import MetricValues
from edl_sim.hpa.spec import ExternalMetricSource
from edl_sizing import ClusterSnapshot, Job, Node, Plan, Pod, SizeHistory, class_key
from edl_sizing.sizing_round import RESCALE_WINDOW_S, Observation, run_round

SERVICE_NAMESPACE = "services"


class EdlPolicy(HpaPolicy):
    """The resource-aware sizer, applied by the native HPA."""

    name = "edl"

    def __init__(self, settings: PolicySettings) -> None:
        hpa = read_manifest(settings.hpa_edl_manifest, "hpa-sizing.yaml")
        self.metric = one_metric(hpa, ExternalMetricSource, "External")
        super().__init__(settings, hpa)
        self.history = SizeHistory()
        self.plan: Plan | None = None
        self._nodes: list[Node] = []
        self._pauses_seen: dict[str, tuple[float, int]] = {}
        self._progress_seen: dict[str, tuple[float, float]] = {}
        self._last_history = float("-inf")

    def start(self, sim: SimulationView) -> None:
        """Build the sizer's node list and start its loop."""
        super().start(sim)
        self._nodes = [Node(n.name, n.allocatable) for n in sim.cluster.nodes]
        sim.at(self.settings.sizing_interval, self._round)

    def submitted(self, job: JobRun) -> None:
        """Create the Deployment and HPA (and prime the history with the job's curve)."""
        if self.settings.prime_history:
            for size, rate in sorted(job.curve.points.items()):
                self.history.observe(job.key, size, rate, self.sim.now)
        super().submitted(job)

    def finished(self, job: JobRun) -> None:
        """Its history stays (the adapter forgets it only after a horizon)."""
        self._pauses_seen.pop(job.key, None)
        self._progress_seen.pop(job.key, None)
        super().finished(job)

    def metric_values(self, job: JobRun) -> MetricValues:
        """``desired_replicas`` for the job from the latest plan (no item: not in it yet)."""
        decision = self.plan.jobs.get(job.key) if self.plan is not None else None
        if decision is None:
            return MetricValues()
        return MetricValues(external={self.metric: [decision.desired * 1000]})

    def _round(self) -> None:
        sim = self.sim
        now = sim.now
        if sim.active:
            if now - self._last_history >= self.settings.history_interval:
                self._observe(now)
                self._last_history = now
            sim.decided()
            self.plan = run_round(self.snapshot(), self.history, self.settings.sizing, now).plan
        else:
            self.plan = None
        sim.at(now + self.settings.sizing_interval, self._round)

    def _observe(self, now: float) -> None:
        """This round's measurements, as the adapter's observer makes them."""
        window = self.settings.observe_window
        for key, job in self.sim.active.items():
            size = rate = pause = planned = None
            rescales = nodes = 0
            stable = job.stable_for(now)
            if stable >= window:
                size, rate = job.world, job.rate
                nodes = len(job.running_placement())
            progress = min(1.0, job.samples_at(now) / job.spec.work_samples)
            seen = self._progress_seen.get(key)
            if rate is not None and seen is not None and stable >= now - seen[0]:
                if progress > seen[1]:
                    planned = rate * (now - seen[0]) / (progress - seen[1])
            self._progress_seen[key] = (now, progress)
            seen_sum, seen_count = self._pauses_seen.get(key, (0.0, 0))
            if job.pause_count > seen_count:
                pause = (job.pause_sum - seen_sum) / (job.pause_count - seen_count)
                rescales = job.pause_count - seen_count
                self._pauses_seen[key] = (job.pause_sum, job.pause_count)
            klass = class_key(NAMESPACE, job.spec.curve) if self.settings.class_history else None
            Observation(key, size, rate, pause, rescales, klass, nodes, progress, planned).apply(
                self.history, now
            )

    def snapshot(self) -> ClusterSnapshot:
        """The simulated cluster as the adapter's capacity source would see it."""
        return ClusterSnapshot(tuple(self._nodes), tuple(self._pods()), tuple(self._jobs()))

    def _pods(self) -> list[Pod]:
        pods = []
        for pod in self.sim.cluster.pods.values():
            job = pod.job
            pods.append(
                Pod(
                    NAMESPACE if job is not None else SERVICE_NAMESPACE,
                    pod.name,
                    pod.requests,
                    pod.priority,
                    pod.node.name if pod.node is not None else None,
                    job.key if job is not None else None,
                )
            )
        return pods

    def _jobs(self) -> list[Job]:
        jobs = []
        for run in self.sim.active.values():
            spec = run.spec
            newest = max((p.created for p in run.pods.values()), default=None)
            window_start = self.sim.now - RESCALE_WINDOW_S
            recent = sum(1 for t, _ in run.worlds[1:] if t > window_start)
            jobs.append(
                Job(
                    NAMESPACE,
                    spec.name,
                    spec.worker,
                    replicas=run.replicas,
                    min_replicas=run.min_workers,
                    max_replicas=run.max_workers,
                    priority=spec.priority,
                    arrival=spec.submit,
                    last_rescale=newest,
                    requested=spec.requested,
                    recent_rescales=recent,
                    job_class=spec.curve if self.settings.class_history else None,
                )
            )
        return jobs
