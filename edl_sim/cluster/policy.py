"""What a sizing policy is to the simulator: a small Protocol, registered by name.

A policy decides how many workers each job's Deployment asks for (and, for ``static``, when
a job may start at all). It sees the simulated cluster through :class:`SimulationView` and
acts only through it: scaling a Deployment, admitting a gang, scheduling its own loops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from edl_sim.cluster.inputs import JobSpec
from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.sim_cluster import SimCluster
from edl_sizing import SizingPolicy, defaults


class SimulationView(Protocol):
    """The simulator as a policy sees it."""

    @property
    def now(self) -> float:
        """Simulated seconds."""
        ...

    @property
    def cluster(self) -> SimCluster[JobRun]:
        """Nodes and pods."""
        ...

    @property
    def active(self) -> Mapping[str, JobRun]:
        """Submitted, unfinished jobs by key."""
        ...

    def at(self, time: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` at ``time`` (after the cluster's own events of that instant)."""
        ...

    def scale(self, job: JobRun, replicas: int) -> None:
        """Set the job Deployment's spec.replicas (pods are created or removed at once)."""
        ...

    def admit(self, job: JobRun, workers: int) -> bool:
        """Create and bind ``workers`` pods at once if all fit now (gang admission)."""
        ...

    def decided(self) -> None:
        """Count one policy decision (a sizing round, an HPA sync, an autoscaler loop)."""
        ...


class Policy(Protocol):
    """A sizing policy under test."""

    name: str

    def bounds(self, spec: JobSpec) -> tuple[int, int]:
        """The (min, max) world the job's agent is run with under this policy."""
        ...

    def start(self, sim: SimulationView) -> None:
        """Called once before the first event (schedule the policy's loops here)."""
        ...

    def submitted(self, job: JobRun) -> None:
        """A job arrived (create its Deployment, its HPA, or queue it)."""
        ...

    def finished(self, job: JobRun) -> None:
        """A job trained all its samples (its pods are already gone)."""
        ...

    def settle(self) -> bool:
        """React to the instant's changes (e.g. admit queued jobs); True if it changed any."""
        ...


@dataclass(frozen=True)
class PolicySettings:
    """Knobs of the policies (the defaults are the shipped configuration)."""

    hpa_sync_period: float = 15.0
    """kube-controller-manager's --horizontal-pod-autoscaler-sync-period."""
    configurable_tolerance: bool = True
    """HPAConfigurableTolerance (beta, on by default from Kubernetes 1.35): per-HPA tolerance."""
    hpa_throughput_manifest: Path | None = None
    """The per-pod throughput HPA (default: the packaged copy of hpa-throughput.yaml)."""
    hpa_edl_manifest: Path | None = None
    """The HPA on ``desired_replicas`` (default: the packaged copy of hpa-sizing.yaml)."""
    throughput_target_efficiency: float = 0.8
    """hpa-throughput: the per-pod target as a share of the job's one-worker throughput."""
    sizing_interval: float = defaults.ROUND_INTERVAL_S
    """edl: seconds between sizing decisions (the adapter's --sizing-interval)."""
    history_interval: float = defaults.HISTORY_INTERVAL_S
    """edl: seconds between folds of the jobs' measured throughput into the history."""
    observe_window: float = defaults.THROUGHPUT_WINDOW_S
    """edl: a throughput is measured only over a world unchanged for this long (the
    adapter's metric window)."""
    prime_history: bool = False
    """edl: the sizer's history starts with each job's curve points (a job class measured
    before); off: it knows nothing of a job until it measures it running."""
    class_history: bool = True
    """edl: each job's curve is its class (as if it carried the ``edl.paddlepaddle.org/class``
    label): the history is kept per class too, and a new job starts from its class's sizes."""
    sizing: SizingPolicy = field(default_factory=SizingPolicy)
    """edl: the sizer's policy (headroom, hold-off, pay-back, exploration, prior)."""
    edl2018_interval: float = 5.0
    """edl-2018: the autoscaler's loop period."""
    max_load_desired: float = 0.97
    """edl-2018: the requested share of the cluster above which jobs shrink (and up to which
    they grow)."""
    baseline_interval: float = 60.0
    """tiresias, optimus: seconds between their scheduling rounds (the Pollux artifact's)."""


PolicyFactory = Callable[[PolicySettings], Policy]
