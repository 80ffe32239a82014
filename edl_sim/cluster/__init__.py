"""``edl-sim``: a discrete-event cluster simulator of what elastic sizing does to a cluster.

It runs a workload (jobs with their scaling curves) on a cluster (node groups, optional
higher-priority background services) under one or more sizing policies and reports job
completion and pending times, allocation utilisation, rescales and the time they cost:

* ``static``: each job at its requested size, FIFO with backfill;
* ``hpa-throughput``: the example per-pod throughput HPA on every job;
* ``edl-2018``: the original EDL autoscaler's fulfillment rule;
* ``edl``: :func:`edl_sizing.decide` through each job's HPA.

The policies drive the project's own code: the sizer is :mod:`edl_sizing` and
every HPA is :class:`edl_sim.hpa.HorizontalController`. Throughput between and
beyond a curve's measured sizes comes from the sizer's own fit
(:func:`edl_sizing.fit_usl`). Nothing here imports Paddle.

Entry points: :func:`load_workload` (the CSV files), :class:`Simulation` (one policy),
:func:`compare` (several, same inputs), :mod:`.report` (figures, table, JSON),
:mod:`.scenarios` (the shipped scenarios), ``edl-sim`` (:mod:`.cli`).
"""

from edl_sim.cluster.engine import JobOutcome, SimResult, SimSettings, Simulation
from edl_sim.cluster.inputs import (
    InputError,
    JobSpec,
    SimulationError,
    Workload,
    load_workload,
)
from edl_sim.cluster.jobs import PauseModel
from edl_sim.cluster.policy import Policy, PolicySettings

__all__ = [
    "InputError",
    "JobOutcome",
    "JobSpec",
    "PauseModel",
    "Policy",
    "PolicySettings",
    "SimResult",
    "SimSettings",
    "Simulation",
    "SimulationError",
    "Workload",
    "load_workload",
]
