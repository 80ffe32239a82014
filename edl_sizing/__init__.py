"""Resource-aware elastic sizing: how many workers each training job should run now.

The core of this package is pure (no Kubernetes, Flask or clock): the adapter, the cluster
simulator and ``make demo`` all call the same :func:`decide`.

**In** (plain frozen dataclasses, :mod:`.cluster`):

* :class:`Node`: ``name``, ``allocatable`` (:class:`Resources`: ``cpu`` cores, ``memory``
  bytes, ``gpu`` ``nvidia.com/gpu`` devices), ``ready``, ``schedulable``, ``taints``,
  ``labels``.
* :class:`Pod`: ``namespace``, ``name``, ``requests``, ``priority`` (int), ``node`` (None:
  Pending), ``job`` (the ``namespace/name`` key of the job it is a worker of, or None),
  ``tolerations``, ``node_selector``.
* :class:`Job`: ``namespace``, ``name``, ``worker`` (requests of one worker), ``replicas``
  (current), ``min_replicas``, ``max_replicas``, ``weight``, ``min_marginal_speedup``,
  ``priority``, ``arrival`` (s), ``last_rescale`` (s, last growth; None: unknown),
  ``rescale_pause_s`` (s), ``observed`` (world size -> samples/s), ``error`` (bad input:
  the job falls back to its current replicas).
* :class:`SizingPolicy`: ``headroom`` per node, ``hold_off_s``, ``payback_s``,
  ``exploration`` (x the largest size measured), ``prior`` (:class:`ScalingPrior`).
* ``now``: seconds on the same clock as ``arrival`` and ``last_rescale``.

**Out**: a :class:`Plan` (``jobs``: key -> :class:`JobDecision` with ``current``,
``desired``, ``limited_by`` (:class:`Reason`), ``message``, ``marginal_speedup`` (ratio
to one worker's throughput), the fitted :class:`ScalingCurve`, planned workers per node;
plus ``allocatable`` and ``free`` summed over usable nodes, the protected pending pods
and where they were placed, the room left per node). ``Plan.to_dict()`` is its JSON form.

Around the core: :class:`CapacitySource` (``snapshot() -> ClusterSnapshot | None``) with
:class:`StaticCapacitySource` here and a Kubernetes one in the adapter
(``metrics_adapter.sizing.cluster_watch``); :class:`SizeHistory` and :class:`HistoryStore`
(memory here, a ConfigMap in ``metrics_adapter.sizing.history_configmap``) keep the per-size
throughput every replica decides from. One round as every caller runs it (the adapter's loop,
``edl-sim``'s ``edl`` policy): :func:`run_round` (:mod:`.sizing_round`) turns a snapshot and
the history into the jobs ``decide`` sees, decides, and falls back to every job's current
replicas if the decision fails; :class:`Observation` folds a round's measurements into the
history.

Example::

    from edl_sizing import Job, Node, Resources, decide
    plan = decide(
        [Node("n1", Resources(cpu=4))], [],
        [Job("default", "digits", Resources(cpu=1), replicas=1, max_replicas=4)],
        now=0.0,
    )
    plan.jobs["default/digits"].desired   # 2: grows, capped at 2x the largest size measured
"""

from edl_sizing.capacity import (
    CapacityError,
    CapacitySource,
    ClusterSnapshot,
    StaticCapacitySource,
    snapshot_from_dict,
)
from edl_sizing.cluster import Job, Node, Pod, Quota, Taint, Toleration
from edl_sizing.decision import (
    Demand,
    JobDecision,
    Plan,
    Reason,
    SizingPolicy,
    decide,
    job_error,
)
from edl_sizing.history import (
    HistoryError,
    HistoryStore,
    MemoryHistoryStore,
    SizeHistory,
    class_key,
)
from edl_sizing.queues import FlavorRoom, QueueDemand, QueueGroup, QueueQuota
from edl_sizing.resources import GPU, ResourceError, Resources
from edl_sizing.scaling import ScalingCurve, ScalingPrior, SizeModel, fit_usl
from edl_sizing.sizing_round import Observation, RoundResult, run_round, with_history

__all__ = [
    "GPU",
    "CapacityError",
    "CapacitySource",
    "ClusterSnapshot",
    "Demand",
    "FlavorRoom",
    "HistoryError",
    "HistoryStore",
    "Job",
    "JobDecision",
    "MemoryHistoryStore",
    "Node",
    "Observation",
    "Plan",
    "Pod",
    "QueueDemand",
    "QueueGroup",
    "QueueQuota",
    "Quota",
    "Reason",
    "ResourceError",
    "Resources",
    "RoundResult",
    "ScalingCurve",
    "ScalingPrior",
    "SizeHistory",
    "SizeModel",
    "SizingPolicy",
    "StaticCapacitySource",
    "Taint",
    "Toleration",
    "class_key",
    "decide",
    "fit_usl",
    "job_error",
    "run_round",
    "snapshot_from_dict",
    "with_history",
]
