"""An HPA per job, stepped with the project's HPA model (``edl_sim.hpa``) every sync.

Each job's Deployment starts at its requested workers; its HPA is the policy's manifest with
the job's bounds (``minReplicas``/``maxReplicas`` = the job's min/max workers), created with
the job, first reconciled one sync period later (as kube-controller-manager does). The
policy supplies only the metric values the HPA reads at each sync.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

import yaml

from edl_sim.cluster.inputs import JobSpec, SimulationError
from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.policy import PolicySettings, SimulationView
from edl_sim.hpa import (
    ControllerSettings,
    HorizontalController,
    HorizontalPodAutoscaler,
    HpaError,
    MetricValues,
    PodPhase,
    PodState,
    load_hpa,
    parse_hpa,
)
from edl_sim.hpa.spec import CrossVersionObjectReference, HorizontalPodAutoscalerSpec


def read_manifest(path: Path | None, packaged: str) -> HorizontalPodAutoscaler:
    """The HPA manifest at ``path``, or the packaged one named ``packaged``.

    Raises:
        SimulationError: the manifest is not a valid HPA.
    """
    try:
        if path is not None:
            return load_hpa(path)
        text = resources.files("edl_sim.cluster").joinpath(packaged).read_text()
        return parse_hpa(yaml.safe_load(text))
    except (HpaError, OSError) as e:
        raise SimulationError(f"{path or packaged}: {e}") from e


def one_metric(hpa: HorizontalPodAutoscaler, source: type, kind: str) -> str:
    """The name of the manifest's only metric, which must be of ``source`` type.

    Raises:
        SimulationError: the HPA has other metrics, or none of that kind.
    """
    metrics = hpa.spec.metrics
    if len(metrics) != 1 or not isinstance(metrics[0].source, source):
        raise SimulationError(f"{hpa.name}: the HPA must have exactly one {kind} metric")
    return metrics[0].metric_name


class HpaPolicy:
    """Base of the policies that size through one HPA per job."""

    name = "hpa"

    def __init__(self, settings: PolicySettings, hpa: HorizontalPodAutoscaler) -> None:
        self.settings = settings
        self.hpa = hpa
        self.controller_settings = ControllerSettings(
            sync_period=settings.hpa_sync_period,
            configurable_tolerance=settings.configurable_tolerance,
        )
        self._hpas: dict[str, HorizontalController] = {}
        self._sim: SimulationView | None = None

    @property
    def sim(self) -> SimulationView:
        """The simulation (after :meth:`start`)."""
        assert self._sim is not None
        return self._sim

    def bounds(self, spec: JobSpec) -> tuple[int, int]:
        """The job's own min and max workers."""
        return spec.min_workers, spec.max_workers

    def start(self, sim: SimulationView) -> None:
        """Remember the simulation."""
        self._sim = sim

    def job_spec(self, job: JobRun) -> HorizontalPodAutoscalerSpec:
        """The HPA for this job: the manifest with the job's target and bounds."""
        return replace(
            self.hpa.spec,
            scale_target_ref=CrossVersionObjectReference("Deployment", job.spec.name, "apps/v1"),
            min_replicas=job.min_workers,
            max_replicas=job.max_workers,
        )

    def submitted(self, job: JobRun) -> None:
        """Create the Deployment at the requested size and its HPA."""
        self.sim.scale(job, job.spec.requested)
        now = self.sim.now
        self._hpas[job.key] = HorizontalController(
            self.job_spec(job), self.controller_settings, created_at=now
        )
        self.sim.at(now + self.settings.hpa_sync_period, lambda: self._sync(job))

    def finished(self, job: JobRun) -> None:
        """The HPA goes with its Deployment."""
        self._hpas.pop(job.key, None)

    def settle(self) -> bool:
        """HPAs act only at their syncs."""
        return False

    def metric_values(self, job: JobRun) -> MetricValues:
        """What the metrics APIs answer this sync for the job's HPA."""
        raise NotImplementedError

    def _sync(self, job: JobRun) -> None:
        hpa = self._hpas.get(job.key)
        if hpa is None:
            return
        sim = self.sim
        sim.decided()
        pods = [
            PodState(
                pod.name,
                phase=PodPhase.RUNNING if pod.running else PodPhase.PENDING,
                ready=pod.running,
                start_time=pod.bound_at,
            )
            for pod in job.pods.values()
        ]
        decision = hpa.step(
            sim.now, job.replicas, self.metric_values(job), pods, status_replicas=len(job.pods)
        )
        if decision.rescaled:
            sim.scale(job, decision.desired_replicas)
        sim.at(sim.now + self.settings.hpa_sync_period, lambda: self._sync(job))
