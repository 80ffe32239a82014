"""The policies ``edl-sim`` compares, by name (a new one is one file and one line here)."""

from __future__ import annotations

from edl_sim.cluster.policies.edl import EdlPolicy
from edl_sim.cluster.policies.edl2018 import Edl2018Policy
from edl_sim.cluster.policies.hpa_throughput import ThroughputHpaPolicy
from edl_sim.cluster.policies.optimus import OptimusPolicy
from edl_sim.cluster.policies.static import StaticPolicy
from edl_sim.cluster.policies.tiresias import TiresiasPolicy
from edl_sim.cluster.policy import PolicyFactory

POLICIES: dict[str, PolicyFactory] = {
    StaticPolicy.name: StaticPolicy,
    ThroughputHpaPolicy.name: ThroughputHpaPolicy,
    Edl2018Policy.name: Edl2018Policy,
    EdlPolicy.name: EdlPolicy,
    TiresiasPolicy.name: TiresiasPolicy,
    OptimusPolicy.name: OptimusPolicy,
}
"""Policy name -> factory taking :class:`~edl_sim.cluster.policy.PolicySettings`."""

__all__ = ["POLICIES"]
