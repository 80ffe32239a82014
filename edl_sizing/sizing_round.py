"""One sizing round, as the adapter and the simulator both run it.

:func:`decide` sees each job with what the shared :class:`~edl_sizing.history.SizeHistory`
knows of it; turning a cluster snapshot and that history into those jobs, folding a round's
measurements into the history, and the plan served when ``decide`` fails are the same for
every caller, so they live here once: ``edl-sim``'s figures are evidence about the adapter
only while both run this code.

* :meth:`Observation.apply`: one job's measurements of a round (a throughput at a world
  size on a number of nodes, the mean pause of its new rescales, its progress) folded into
  the history, under the job's key and, for a job of a class, its class's key (a class's
  pause counts no rescale of its own; progress is the job's own).
* :func:`with_history`: a job as ``decide`` sees it. Its sizes are the history's over what
  its source said (its class's fill the placements it never measured; records of a known
  placement go to ``Job.placed``, the others to ``Job.observed``), with their spread; its
  progress and planned samples are the history's; its pause is the history's
  (its class's until its own); its request is the source's (the ``requested-workers``
  annotation), else the size it was first measured at (the size it was created with), else
  its replicas now; its rescales are the most of the source's count and the history's within
  :data:`RESCALE_WINDOW_S` (the rescale budget's window).
* :func:`run_round`: the snapshot's jobs with their history, then ``decide``; a decision
  that raises is kept (the caller logs it) and every job is served its current replicas
  (:func:`fallback_plan`).

Pure: values in, values out; the clock is the caller's ``now``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from edl_sizing.capacity import ClusterSnapshot
from edl_sizing.cluster import Job
from edl_sizing.decision import JobDecision, Plan, Reason, SizingPolicy, decide
from edl_sizing.history import SizeHistory, class_key
from edl_sizing.resources import Resources
from edl_sizing.scaling import fit_usl

RESCALE_WINDOW_S = 3600.0
"""A job's rescales count against the policy's budget (``SizingPolicy.rescale_budget_per_hour``)
for this long."""


@dataclass(frozen=True)
class Observation:
    """One job's measurements this round."""

    job: str
    size: int | None = None
    samples_per_second: float | None = None
    pause_s: float | None = None
    rescales: int = 0
    """New rescale pauses counted since the last round."""
    job_class: str | None = None
    """The class's history key (:func:`edl_sizing.class_key`): recorded there too."""
    nodes: int = 0
    """The nodes the measured world spanned (0: not known)."""
    progress: float | None = None
    """The share of its planned samples the job has trained (None: not known)."""
    planned: float | None = None
    """Its planned samples: throughput over the rate of progress (None: not measured)."""

    def apply(self, history: SizeHistory, now: float) -> bool:
        """Fold into ``history``; returns whether anything was added."""
        changed = False
        if self.size is not None and self.samples_per_second is not None:
            rate = self.samples_per_second
            history.observe(self.job, self.size, rate, now, self.nodes)
            if self.job_class is not None:
                history.observe(self.job_class, self.size, rate, now, self.nodes)
            changed = True
        if self.progress is not None:
            history.observe_progress(self.job, self.progress, now, self.planned)
            changed = True
        if self.pause_s is not None:
            history.observe_pause(self.job, self.pause_s, now, max(1, self.rescales))
            if self.job_class is not None:
                history.observe_pause(self.job_class, self.pause_s, now, 0)
            changed = True
        return changed


def job_class_key(job: Job) -> str | None:
    """The history key of the job's class (None: the job has no class label)."""
    return class_key(job.namespace, job.job_class) if job.job_class else None


def with_history(job: Job, history: SizeHistory, now: float) -> Job:
    """The job as :func:`decide` sees it (see the module docstring)."""
    klass = job_class_key(job)
    records = history.placed(job.key, klass)
    observed = {**job.observed, **{n: x for (n, k), x in records.items() if k == 0}}
    placed = {**job.placed, **{p: x for p, x in records.items() if p[1] > 0}}
    pause = history.pause(job.key, klass) or job.rescale_pause_s
    requested = job.requested or history.first_size(job.key) or job.replicas
    recent = history.rescales_since(job.key, now - RESCALE_WINDOW_S)
    progress, planned = history.progress(job.key)
    return replace(
        job,
        observed=observed,
        placed=placed,
        spread=max(job.spread, history.spread(job.key, klass)),
        progress=job.progress if job.progress is not None else progress,
        planned_samples=job.planned_samples or planned,
        rescale_pause_s=pause,
        requested=requested,
        recent_rescales=max(job.recent_rescales, recent),
    )


@dataclass(frozen=True)
class RoundResult:
    """What one round decided, and from what."""

    jobs: tuple[Job, ...]
    """The jobs as :func:`decide` saw them (with their history)."""
    plan: Plan
    error: Exception | None = None
    """What ``decide`` raised (the plan is then :func:`fallback_plan`)."""


def run_round(
    snapshot: ClusterSnapshot, history: SizeHistory, policy: SizingPolicy, now: float
) -> RoundResult:
    """One round over ``snapshot`` with ``history`` (see the module docstring)."""
    jobs = tuple(with_history(j, history, now) for j in snapshot.jobs)
    try:
        plan = decide(
            snapshot.nodes,
            snapshot.pods,
            jobs,
            policy,
            now,
            snapshot.quotas,
            snapshot.queues,
            snapshot.waiting,
        )
    except Exception as e:  # the caller logs it; every job keeps its replicas
        return RoundResult(jobs, fallback_plan(jobs, policy, now), e)
    return RoundResult(jobs, plan)


def fallback_plan(jobs: Sequence[Job], policy: SizingPolicy, now: float) -> Plan:
    """Every job at its current replicas, labelled ``Reason.FALLBACK``."""
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
