"""``hpa-throughput``: the example per-pod throughput HPA on every job.

The HPA is ``manifests/examples/digits-trainer/hpa-throughput.yaml`` (packaged as
``hpa-throughput.yaml``; a test keeps the two equal): a Pods metric ``samples_per_second``
with an AverageValue target, scale-up 2 pods a minute after a 30 s window, scale-down 1 pod a
minute after 5 minutes. The example's 400 samples/s is one job's number; for each simulated
job the target is ``throughput_target_efficiency`` x the job's one-worker throughput, i.e.
"keep adding trainers while each still delivers that share of what one worker alone does".

Each pod of the world reports the job's samples per second since the previous sync divided by
the world size (a data-parallel rank trains its share of every step); pods not yet Running
report nothing (the HPA counts them unready); a job waiting below its minimum reports 0.
"""

from __future__ import annotations

from dataclasses import replace

from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.policies.hpa_loop import HpaPolicy, one_metric, read_manifest
from edl_sim.cluster.policy import PolicySettings
from edl_sim.hpa import MetricValues
from edl_sim.hpa.spec import HorizontalPodAutoscalerSpec, MetricTarget, PodsMetricSource


class ThroughputHpaPolicy(HpaPolicy):
    """A plain per-pod throughput HPA per job."""

    name = "hpa-throughput"

    def __init__(self, settings: PolicySettings) -> None:
        hpa = read_manifest(settings.hpa_throughput_manifest, "hpa-throughput.yaml")
        self.metric = one_metric(hpa, PodsMetricSource, "Pods")
        super().__init__(settings, hpa)
        self._last: dict[str, tuple[float, float]] = {}

    def job_spec(self, job: JobRun) -> HorizontalPodAutoscalerSpec:
        """The manifest with the job's bounds and a target scaled to the job's curve."""
        spec = super().job_spec(job)
        target = self.settings.throughput_target_efficiency * job.curve.throughput(1)
        metric = spec.metrics[0]
        assert isinstance(metric.source, PodsMetricSource)
        source = replace(
            metric.source,
            target=MetricTarget(
                metric.source.target.type, average_value_milli=max(1, round(target * 1000))
            ),
        )
        return replace(spec, metrics=(replace(metric, source=source),))

    def submitted(self, job: JobRun) -> None:
        """Start counting its samples, then create the Deployment and HPA."""
        self._last[job.key] = (self.sim.now, 0.0)
        super().submitted(job)

    def finished(self, job: JobRun) -> None:
        """Forget it."""
        self._last.pop(job.key, None)
        super().finished(job)

    def metric_values(self, job: JobRun) -> MetricValues:
        """Per-pod samples per second of the world's pods."""
        now = self.sim.now
        since, before = self._last[job.key]
        samples = job.samples_at(now)
        self._last[job.key] = (now, samples)
        rate = (samples - before) / (now - since) if now > since else 0.0
        running = [pod.name for pod in job.pods.values() if pod.running]
        per_pod = rate / len(running) if running else 0.0
        milli = round(per_pod * 1000)
        return MetricValues(pods={self.metric: dict.fromkeys(running, milli)})
