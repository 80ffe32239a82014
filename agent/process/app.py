"""Composition root of the agent: builds the registry from its collaborators.

`create_registry` takes every source explicitly, so tests and the elastic machinery can wire
an agent with fakes (an NVML fake, a stub trainer) and nothing is global.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from prometheus_client import Info
from prometheus_client.registry import CollectorRegistry

import agent
from agent.collectors.checkpoints import CheckpointCollector
from agent.collectors.gpu import GpuCollector, Nvml
from agent.collectors.health import CollectorHealth, GuardedCollector, HealthCollector
from agent.collectors.process import ProcessTreeMeter, TrainerProcessCollector
from agent.collectors.supervision import SupervisedTrainer, SupervisionCollector
from agent.collectors.trainer import TrainerReportCollector
from agent.process.rescales import RescaleLog


def create_registry(
    metrics_dir: Path,
    trainer: SupervisedTrainer,
    nvml: Nvml | None,
    rescales: RescaleLog | None = None,
    meter: ProcessTreeMeter | None = None,
    health: CollectorHealth | None = None,
) -> CollectorRegistry:
    """A private registry with every agent collector, each guarded and self-monitored."""
    health = health or CollectorHealth()
    registry = CollectorRegistry(auto_describe=False)
    guarded = {
        TrainerReportCollector.NAME: TrainerReportCollector(metrics_dir, health),
        SupervisionCollector.NAME: SupervisionCollector(trainer, rescales or RescaleLog()),
        TrainerProcessCollector.NAME: TrainerProcessCollector(
            meter or ProcessTreeMeter(), lambda: trainer.pid
        ),
        GpuCollector.NAME: GpuCollector(nvml, health),
        CheckpointCollector.NAME: CheckpointCollector(metrics_dir, health),
    }
    for name, collector in guarded.items():
        registry.register(GuardedCollector(name, collector, health))
    registry.register(HealthCollector(health))
    Info("edl_agent_build", "Version of the agent (1 per process).", registry=registry).info(
        {
            "version": agent.__version__,
            "revision": os.environ.get("EDL_BUILD_REVISION", "unknown"),
            "python_version": platform.python_version(),
        }
    )
    return registry
