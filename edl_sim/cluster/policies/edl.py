"""``edl``: the adapter's sizer (:func:`edl_sizing.decide`) through each job's HPA.

What the adapter does, on the simulated cluster:

* every ``sizing_interval`` one :func:`~edl_sizing.decide` round over the nodes,
  every non-terminated pod (bound or Pending; service pods with their priority) and every
  job (its Deployment's replicas, min/max workers, priority, arrival, the creation time of
  its newest worker as ``last_rescale``, the measured rescale pause and throughput per size
  from the shared :class:`~edl_sizing.SizeHistory`);
* every ``history_interval`` the jobs' measurements are folded into that history, as the
  adapter's observer does: a throughput at size n only over a world unchanged (and not
  paused) for ``observe_window``; the new rescale pauses' mean from the agent's histogram;
  with ``class_history`` each job carries its curve's name as its class label
  (``edl.paddlepaddle.org/class``), so it is also recorded under its class and a new job of
  a class measured before starts from the class's sizes;
* each job's request (``requested_workers``, the Deployment's replicas at creation) and its
  rescales in the last hour go to the sizer as the adapter gives them;
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
from edl_sizing import Job, Node, Plan, Pod, SizeHistory, class_key, decide

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
        self._last_history = float("-inf")
        self._class: dict[str, str | None] = {}

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
        self._class[job.key] = (
            class_key(NAMESPACE, job.spec.curve) if self.settings.class_history else None
        )
        super().submitted(job)

    def finished(self, job: JobRun) -> None:
        """Its history stays (the adapter forgets it only after a horizon)."""
        self._pauses_seen.pop(job.key, None)
        self._class.pop(job.key, None)
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
            self.plan = decide(
                self._nodes, self._pods(), self._jobs(), self.settings.sizing, now=now
            )
        else:
            self.plan = None
        sim.at(now + self.settings.sizing_interval, self._round)

    def _observe(self, now: float) -> None:
        window = self.settings.observe_window
        for key, job in self.sim.active.items():
            keys = [k for k in (key, self._class.get(key)) if k is not None]
            if job.stable_for(now) >= window:
                for k in keys:
                    self.history.observe(k, job.world, job.rate, now)
            seen_sum, seen_count = self._pauses_seen.get(key, (0.0, 0))
            if job.pause_count > seen_count:
                mean = (job.pause_sum - seen_sum) / (job.pause_count - seen_count)
                count = job.pause_count - seen_count
                for k in keys:
                    self.history.observe_pause(k, mean, now, count if k == key else 0)
                self._pauses_seen[key] = (job.pause_sum, job.pause_count)

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
        for key, run in self.sim.active.items():
            spec = run.spec
            newest = max((p.created for p in run.pods.values()), default=None)
            klass = self._class.get(key)
            hour_ago = self.sim.now - 3600.0
            recent = sum(1 for t, _ in run.worlds[1:] if t > hour_ago)
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
                    rescale_pause_s=self.history.pause(key, klass),
                    observed=self.history.observed(key, klass),
                    requested=spec.requested,
                    recent_rescales=recent,
                )
            )
        return jobs
