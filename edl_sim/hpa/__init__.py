"""HPA policy simulator and tuner: a decision-exact model of the HPA controller (v1.34-1.35).

`HorizontalController.step()` reconciles one sync from externally supplied metric values,
so the same trace can drive this model and a real kube-controller-manager. The CLI
(`edl-hpa simulate|tune`) replays recorded metrics through it. Nothing here imports Paddle.
"""

from __future__ import annotations

from edl_sim.hpa.controller import (
    Condition,
    ControllerSettings,
    Decision,
    HorizontalController,
    HpaModel,
    MetricStatus,
    MetricValues,
    Recommendation,
    ScaleEvent,
    default_pods,
)
from edl_sim.hpa.errors import (
    HpaError,
    ManifestError,
    MetricUnavailable,
    QuantityError,
    TraceError,
)
from edl_sim.hpa.manifest import load_hpa, parse_hpa
from edl_sim.hpa.replicas import (
    PodMetric,
    PodPhase,
    PodState,
    ReplicaCalculator,
    Tolerances,
)
from edl_sim.hpa.spec import (
    Behavior,
    HorizontalPodAutoscaler,
    HorizontalPodAutoscalerSpec,
    ScalingPolicy,
    ScalingRules,
)

__all__ = [
    "Behavior",
    "Condition",
    "ControllerSettings",
    "Decision",
    "HorizontalController",
    "HorizontalPodAutoscaler",
    "HorizontalPodAutoscalerSpec",
    "HpaError",
    "HpaModel",
    "ManifestError",
    "MetricStatus",
    "MetricUnavailable",
    "MetricValues",
    "PodMetric",
    "PodPhase",
    "PodState",
    "QuantityError",
    "Recommendation",
    "ReplicaCalculator",
    "ScaleEvent",
    "ScalingPolicy",
    "ScalingRules",
    "Tolerances",
    "TraceError",
    "default_pods",
    "load_hpa",
    "parse_hpa",
]
