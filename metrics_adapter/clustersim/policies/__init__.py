"""The policies ``edl-sim`` compares, by name (a new one is one file and one line here)."""

from __future__ import annotations

from metrics_adapter.clustersim.policies.edl import EdlPolicy
from metrics_adapter.clustersim.policies.edl2018 import Edl2018Policy
from metrics_adapter.clustersim.policies.hpa_throughput import ThroughputHpaPolicy
from metrics_adapter.clustersim.policies.static import StaticPolicy
from metrics_adapter.clustersim.policy import PolicyFactory

POLICIES: dict[str, PolicyFactory] = {
    StaticPolicy.name: StaticPolicy,
    ThroughputHpaPolicy.name: ThroughputHpaPolicy,
    Edl2018Policy.name: Edl2018Policy,
    EdlPolicy.name: EdlPolicy,
}
"""Policy name -> factory taking :class:`~metrics_adapter.clustersim.policy.PolicySettings`."""

__all__ = ["POLICIES"]
