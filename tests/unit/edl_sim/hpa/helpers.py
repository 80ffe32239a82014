"""Builders for HPA specs used across the unit tests."""

from __future__ import annotations

from typing import Any

from edl_sim.hpa.manifest import parse_hpa
from edl_sim.hpa.spec import HorizontalPodAutoscalerSpec


def pods_metric(name: str = "samples_per_second", average: str = "1") -> dict[str, Any]:
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": name},
            "target": {"type": "AverageValue", "averageValue": average},
        },
    }


def hpa_spec(
    metrics: list[dict[str, Any]] | None = None,
    *,
    min_replicas: int | None = 1,
    max_replicas: int = 100,
    behavior: dict[str, Any] | None = None,
) -> HorizontalPodAutoscalerSpec:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"},
        "maxReplicas": max_replicas,
        "metrics": metrics if metrics is not None else [pods_metric()],
    }
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    if behavior is not None:
        spec["behavior"] = behavior
    document = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "trainer"},
        "spec": spec,
    }
    return parse_hpa(document).spec
