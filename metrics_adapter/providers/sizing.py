"""The sizer inside the adapter: a loop that decides every interval, and the provider serving it.

Each round (:meth:`Sizer.run_once`): the capacity source's snapshot; the shared history,
updated with this replica's observations every ``history_interval`` and otherwise just
read, so that every replica decides from the same stored copy; the pure
:func:`~edl_sizing.decision.decide`; then the plan is published (served,
exported on ``/metrics``, shown at ``/debug/sizing``) and changes become Events on the
Deployments. A failure anywhere keeps the last good history; a failing decision serves
every job its current replica count; a plan older than ``max_age`` is not served (the
HPA then keeps its scale).

:class:`SizingProvider` serves the External metric ``desired_replicas``: one item per job,
labelled ``edl.paddlepaddle.org/job: <name>``, value the replicas the plan wants. A job
name carried by two Deployments of a namespace is ambiguous: it is served no item. The same
value is the custom (Object) metric ``desired_replicas`` of the job's Deployment
(``deployments.apps``), for clusters whose ``external.metrics.k8s.io`` another adapter
(KEDA, Datadog) owns; addressed by the Deployment's name, it is never ambiguous.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from edl_sizing.capacity import CapacitySource, ClusterSnapshot
from edl_sizing.cluster import Job
from edl_sizing.decision import JobDecision, Plan, Reason, SizingPolicy, decide
from edl_sizing.events import EventRecorder, JobEvent
from edl_sizing.history import HistoryStore, SizeHistory, class_key
from edl_sizing.resources import Resources
from edl_sizing.scaling import fit_usl
from metrics_adapter.api.selectors import LabelSelector
from metrics_adapter.errors import NotFoundError, SourceError
from metrics_adapter.periodic import PeriodicTask
from metrics_adapter.providers.protocol import (
    CustomMetricInfo,
    ExternalMetricInfo,
    ExternalPoint,
    MetricPoint,
)
from metrics_adapter.scraping.catalogue import Aggregation, MetricDefinition, MetricKind, SeriesTerm
from metrics_adapter.scraping.pod_registry import DescribedObject
from metrics_adapter.sizing.kube_objects import JOB_LABEL, DeploymentRecord
from metrics_adapter.sizing.metrics import SizingMetrics
from metrics_adapter.sizing.observation import ThroughputObserver

log = logging.getLogger(__name__)
DESIRED_REPLICAS = "desired_replicas"
DEPLOYMENTS = "deployments.apps"
OBJECT_METRIC = CustomMetricInfo(DEPLOYMENTS, True, DESIRED_REPLICAS)


@dataclass(frozen=True)
class PublishedPlan:
    """A plan as served: with the jobs' names and when it was decided."""

    plan: Plan
    names: Mapping[str, str]
    """Job key -> job name (the label value selectors use)."""
    ambiguous: frozenset[tuple[str, str]]
    """(namespace, job name) pairs carried by more than one Deployment."""
    decided_at: float

    def name(self, key: str) -> str:
        """The job name of a job key."""
        return self.names.get(key) or key.partition("/")[2]


def _error_reason(message: str) -> str:
    """A low-cardinality reason for ``edl_adapter_sizing_errors_total``."""
    for needle, reason in (
        ("annotation", "annotation"),
        ("request", "requests"),
        ("PriorityClass", "priority_class"),
        ("carry", "duplicate_job"),
        ("selector", "selector"),
    ):
        if needle in message:
            return reason
    return "invalid"


class Sizer:
    """Decides every ``interval``; :attr:`plan` is the latest published plan."""

    def __init__(
        self,
        source: CapacitySource,
        history: HistoryStore,
        policy: SizingPolicy,
        metrics: SizingMetrics,
        events: EventRecorder,
        clock: Callable[[], float],
        interval: float = 10.0,
        history_interval: float = 60.0,
        observer: ThroughputObserver | None = None,
        owner: Callable[[str], DeploymentRecord | None] = lambda _: None,
    ) -> None:
        self._source = source
        self._history_store = history
        self._policy = policy
        self._metrics = metrics
        self._events = events
        self._clock = clock
        self.interval = interval
        self._history_interval = history_interval
        self._observer = observer
        self._owner = owner
        self._history = SizeHistory()
        self._last_write = float("-inf")
        self._emitted: dict[str, tuple[int, str, int]] = {}
        self._plan: PublishedPlan | None = None
        self._lock = threading.Lock()
        self._task = PeriodicTask("sizing", interval, self.run_once)

    @property
    def plan(self) -> PublishedPlan | None:
        """The latest plan (None before the first round with a synced view)."""
        return self._plan

    def run_once(self) -> PublishedPlan | None:
        """One round; returns the plan published (None: no cluster view yet)."""
        with self._lock:
            now = self._clock()
            snapshot = self._source.snapshot()
            if snapshot is None:
                return None
            # The Deployments as of this snapshot: an Event names the generation the decision
            # was made on, not the one the cache holds after the history's I/O and `decide`
            # (by then the HPA may have acted on the other replica's plan).
            owners = {j.key: self._owner(j.key) for j in snapshot.jobs}
            history = self._refresh_history(snapshot, now)
            jobs = [_with_history(j, history, now) for j in snapshot.jobs]
            try:
                plan = decide(
                    snapshot.nodes, snapshot.pods, jobs, self._policy, now, snapshot.quotas
                )
            except Exception:
                log.exception("sizing decision failed: serving every job its current replicas")
                plan = _fallback_plan(jobs, self._policy, now)
            published = _publish(plan, snapshot, now)
            self._plan = published
            self._metrics.publish(plan, published.names)
            self._emit(published, owners)
            return published

    def _refresh_history(self, snapshot: ClusterSnapshot, now: float) -> SizeHistory:
        try:
            if self._observer is not None and now - self._last_write >= self._history_interval:
                observations = self._observer.collect(snapshot)
                self._last_write = now

                def change(h: SizeHistory) -> bool:
                    changed = [o.apply(h, now) for o in observations]
                    return any(changed)

                self._history = self._history_store.update(change)
            else:
                self._history = self._history_store.load()
        except SourceError as e:
            log.warning("sizing history unavailable, deciding from the last copy read: %s", e)
        return self._history

    def _emit(
        self, published: PublishedPlan, owners: Mapping[str, DeploymentRecord | None]
    ) -> None:
        """One Event per new decision, named so that two replicas' same decision is one.

        The name holds the Deployment's generation as of the decision's snapshot; a record
        that moved on between the snapshot and its lookup (its replicas differ from the
        decision's) emits nothing this round: the next round decides on the new view.
        """
        for key, d in sorted(published.plan.jobs.items()):
            if d.limited_by is Reason.FALLBACK:
                reason = "SizingFallback"
            elif d.limited_by is Reason.WAITING:
                reason = "SizingWaiting"
            elif d.desired > d.current:
                reason = "SizingGrow"
            elif d.desired < d.current:
                reason = "SizingShrink"
            else:
                self._emitted.pop(key, None)
                continue
            owner = owners.get(key)
            if owner is not None and owner.replicas != d.current:
                continue
            generation = owner.generation if owner is not None else 0
            mark = (generation, reason, d.desired)
            if self._emitted.get(key) == mark:
                continue
            self._emitted[key] = mark
            if reason == "SizingFallback":
                self._metrics.errors.labels(_error_reason(d.message)).inc()
            namespace, _, deployment = key.partition("/")
            self._events.record(
                JobEvent(
                    namespace, deployment, reason, d.message, reason == "SizingFallback",
                    owner.uid if owner is not None else "", generation, d.desired,
                )
            )  # fmt: skip
        for gone in set(self._emitted) - set(published.plan.jobs):
            del self._emitted[gone]

    def start(self) -> None:
        """Start deciding every interval."""
        self._task.start()

    def stop(self) -> None:
        """Stop."""
        self._task.stop()


def _with_history(job: Job, history: SizeHistory, now: float) -> Job:
    """The job with the shared history's measurements (over what its source said).

    A job with a class label gets its class's sizes where it measured none itself; its
    request is the annotation, else the size it was first measured at (the size it was
    created with), else its replicas now (not measured yet); its rescales of the last hour
    count against the rescale budget.
    """
    klass = class_key(job.namespace, job.job_class) if job.job_class else None
    observed = {**job.observed, **history.observed(job.key, klass)}
    pause = history.pause(job.key, klass) or job.rescale_pause_s
    requested = job.requested or history.first_size(job.key) or job.replicas
    recent = history.rescales_since(job.key, now - 3600.0)
    return replace(
        job,
        observed=observed,
        rescale_pause_s=pause,
        requested=requested,
        recent_rescales=max(job.recent_rescales, recent),
    )


def _publish(plan: Plan, snapshot: ClusterSnapshot, now: float) -> PublishedPlan:
    names = {j.key: snapshot.job_names.get(j.key, j.name) for j in snapshot.jobs}
    counts = Counter((key.partition("/")[0], name) for key, name in names.items())
    ambiguous = frozenset(pair for pair, n in counts.items() if n > 1)
    return PublishedPlan(plan, names, ambiguous, now)


def _fallback_plan(jobs: list[Job], policy: SizingPolicy, now: float) -> Plan:
    decisions = {
        j.key: JobDecision(
            j.key,
            j.replicas,
            j.replicas,
            Reason.FALLBACK,
            f"stays at {j.replicas}: the sizer failed (see the adapter's log)",
            0.0,
            j.min_replicas,
            j.max_replicas,
            fit_usl({}, policy.prior),
        )
        for j in jobs
    }
    return Plan(now, decisions, Resources(), Resources())


class SizingProvider:
    """Serves ``desired_replicas`` from the sizer's latest plan.

    As an External metric, and as the Object metric of each job's Deployment.
    """

    def __init__(self, sizer: Sizer, clock: Callable[[], float], max_age_s: float) -> None:
        self._sizer = sizer
        self._clock = clock
        self._max_age = max_age_s
        self._definition = MetricDefinition(
            DESIRED_REPLICAS,
            MetricKind.GAUGE,
            SeriesTerm(DESIRED_REPLICAS, counter=False),
            None,
            Aggregation.MAX,
            sizer.interval,
            description="the replicas EDL's sizer wants for the job of this Deployment",
        )

    def _points(self, namespace: str | None, info: CustomMetricInfo) -> dict[str, MetricPoint]:
        """Deployment name -> its point, for the jobs of `namespace` in the fresh plan."""
        if info.metric != DESIRED_REPLICAS or info.group_resource != DEPLOYMENTS:
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for {info.group_resource}"
            )
        published = self.fresh_plan()
        points: dict[str, MetricPoint] = {}
        if published is None:
            return points
        for key, d in sorted(published.plan.jobs.items()):
            job_namespace, _, deployment = key.partition("/")
            if job_namespace != namespace:
                continue
            described = DescribedObject("Deployment", "apps/v1", deployment, job_namespace)
            points[deployment] = MetricPoint(
                described, self._definition, float(d.desired), published.decided_at
            )
        return points

    def get_metric_by_name(
        self,
        namespace: str | None,
        name: str,
        info: CustomMetricInfo,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> MetricPoint:
        """The sizer's decision for the job of Deployment `name`.

        Raises:
            NotFoundError: not a job's Deployment, or no fresh plan.
        """
        point = self._points(namespace, info).get(name)
        if point is None:
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for "
                f"{info.group_resource} {name} (not a sized job, or no fresh sizing plan)"
            )
        return point

    def get_metric_by_selector(
        self,
        namespace: str | None,
        selector: LabelSelector,
        info: CustomMetricInfo,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """Every job Deployment's decision in `namespace`.

        A label selector would need the Deployments' labels, which the plan does not keep:
        only the empty selector matches.
        """
        if selector.requirements:
            return []
        return list(self._points(namespace, info).values())

    def list_all_metrics(self) -> list[CustomMetricInfo]:
        """``desired_replicas`` on ``deployments.apps``."""
        return [OBJECT_METRIC]

    def get_external_metric(
        self, namespace: str, metric_selector: LabelSelector, info: ExternalMetricInfo
    ) -> list[ExternalPoint]:
        """One item per job of ``namespace`` whose job label the selector matches."""
        if info.metric != DESIRED_REPLICAS:
            raise NotFoundError(f"the server could not find the external metric {info.metric}")
        published = self.fresh_plan()
        if published is None:
            return []
        items = []
        for key, d in sorted(published.plan.jobs.items()):
            job_namespace = key.partition("/")[0]
            name = published.name(key)
            labels = {JOB_LABEL: name}
            if job_namespace != namespace or not metric_selector.matches(labels):
                continue
            if (namespace, name) in published.ambiguous:
                continue
            items.append(
                ExternalPoint(
                    DESIRED_REPLICAS,
                    labels,
                    float(d.desired),
                    published.decided_at,
                    self._sizer.interval,
                )
            )
        return items

    def list_all_external_metrics(self) -> list[ExternalMetricInfo]:
        """``desired_replicas``."""
        return [ExternalMetricInfo(DESIRED_REPLICAS)]

    def fresh_plan(self) -> PublishedPlan | None:
        """The latest plan, unless it is older than ``max_age``."""
        published = self._sizer.plan
        if published is None or self._clock() - published.decided_at > self._max_age:
            return None
        return published

    def debug_page(self) -> dict[str, Any]:
        """``/debug/sizing``: the current plan, with job names (read-only)."""
        published = self._sizer.plan
        if published is None:
            return {"plan": None, "reason": "no cluster view yet"}
        doc = published.plan.to_dict()
        for job in doc["jobs"]:
            job["name"] = published.name(job["job"])
            job["served"] = (job["job"].partition("/")[0], job["name"]) not in published.ambiguous
        stale = self._clock() - published.decided_at > self._max_age
        return {"plan": doc, "decidedAt": published.decided_at, "stale": stale}
