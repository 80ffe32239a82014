"""The sizer inside the adapter: a loop that runs one sizing round every interval.

Each round (:meth:`Sizer.run_once`): the capacity source's snapshot; the shared history,
updated with this replica's observations every ``history_interval`` and otherwise just
read, so that every replica decides from the same stored copy; the round itself,
:func:`edl_sizing.sizing_round.run_round` (the simulator's ``edl`` policy runs the same);
then the plan is published (served by :mod:`metrics_adapter.providers.sizing`, exported on
``/metrics``, shown at ``/debug/sizing``) and changes become Events on the Deployments. A
failure anywhere keeps the last good history; a failing decision serves every job its
current replicas.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from edl_sizing.capacity import CapacitySource, ClusterSnapshot
from edl_sizing.decision import Plan, Reason, SizingPolicy
from edl_sizing.events import EventRecorder, JobEvent
from edl_sizing.history import HistoryStore, SizeHistory
from edl_sizing.sizing_round import RoundResult, run_round
from metrics_adapter.errors import SourceError
from metrics_adapter.periodic import PeriodicTask
from metrics_adapter.sizing.kube_objects import DeploymentRecord
from metrics_adapter.sizing.metrics import SizingMetrics
from metrics_adapter.sizing.observation import ThroughputObserver

log = logging.getLogger(__name__)

FIRST_VIEW_POLL_S = 0.25
"""While the capacity source has no view yet (its watches are listing), how often to look: the
first plan follows the first complete view at once, not up to an interval later."""


@dataclass(frozen=True)
class PublishedPlan:
    """A plan as served: with the jobs' names and when it was decided.

    Indexed once when published (`in_namespace`, `named`), so that each of the HPAs' reads
    finds its job without going through every job of the cluster.
    """

    plan: Plan
    names: Mapping[str, str]
    """Job key -> job name (the label value selectors use)."""
    ambiguous: frozenset[tuple[str, str]]
    """(namespace, job name) pairs carried by more than one Deployment."""
    decided_at: float
    _by_namespace: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    _by_name: dict[tuple[str, str], list[str]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for key in sorted(self.plan.jobs):
            namespace = key.partition("/")[0]
            self._by_namespace.setdefault(namespace, []).append(key)
            self._by_name.setdefault((namespace, self.name(key)), []).append(key)

    def name(self, key: str) -> str:
        """The job name of a job key."""
        return self.names.get(key) or key.partition("/")[2]

    def in_namespace(self, namespace: str | None) -> list[str]:
        """The job keys of ``namespace``, in key order."""
        return self._by_namespace.get(namespace or "", [])

    def named(self, namespace: str, names: Iterable[str]) -> list[str]:
        """The job keys of ``namespace`` whose job name is one of ``names``, in key order."""
        return sorted(k for name in set(names) for k in self._by_name.get((namespace, name), ()))


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
        owners: Callable[[], Mapping[str, DeploymentRecord]] = dict,
        timer: Callable[[], float] = time.perf_counter,
        cpu_timer: Callable[[], float] = time.thread_time,
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
        self._owners = owners
        self._timer = timer
        self._cpu_timer = cpu_timer
        self._history = SizeHistory()
        self._last_write = float("-inf")
        self._emitted: dict[str, tuple[int, str, int]] = {}
        self._plan: PublishedPlan | None = None
        self.last_round: RoundResult | None = None
        """The latest round: the jobs as ``decide`` saw them, the plan, any error."""
        self._lock = threading.Lock()
        self._task = PeriodicTask(
            "sizing",
            interval,
            lambda: self.run_once() is not None,
            retry_interval=FIRST_VIEW_POLL_S,
        )

    @property
    def plan(self) -> PublishedPlan | None:
        """The latest plan (None before the first round with a synced view)."""
        return self._plan

    def run_once(self) -> PublishedPlan | None:
        """One round; returns the plan published (None: no cluster view yet)."""
        with self._lock:
            started, cpu_started = self._timer(), self._cpu_timer()
            now = self._clock()
            snapshot = self._source.snapshot()
            if snapshot is None:
                return None
            viewed = self._timer()
            # The Deployments as of this snapshot: an Event names the generation the decision
            # was made on, not the one the cache holds after the history's I/O and `decide`
            # (by then the HPA may have acted on the other replica's plan). One lookup table
            # per round, not one search of the Deployments per job.
            owners = self._owners()
            history = self._refresh_history(snapshot, now)
            before_decide = self._timer()
            result = run_round(snapshot, history, self._policy, now)
            decided = self._timer()
            self.last_round = result
            if result.error is not None:
                log.error(
                    "sizing decision failed: serving every job its current replicas",
                    exc_info=result.error,
                )
            plan = result.plan
            published = _publish(plan, snapshot, now)
            self._plan = published
            self._metrics.publish(plan, published.names)
            self._emit(published, owners)
            self._metrics.timed(
                viewed - started,
                decided - before_decide,
                self._timer() - started,
                self._cpu_timer() - cpu_started,
            )
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

    def _emit(self, published: PublishedPlan, owners: Mapping[str, DeploymentRecord]) -> None:
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


def _publish(plan: Plan, snapshot: ClusterSnapshot, now: float) -> PublishedPlan:
    names = {j.key: snapshot.job_names.get(j.key, j.name) for j in snapshot.jobs}
    counts = Counter((key.partition("/")[0], name) for key, name in names.items())
    ambiguous = frozenset(pair for pair, n in counts.items() if n > 1)
    return PublishedPlan(plan, names, ambiguous, now)
