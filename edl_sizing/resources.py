"""Resources: CPU cores, memory bytes and ``nvidia.com/gpu`` devices, as one value type.

Requests and allocatable amounts are kept in the units people read (cores, not millicores)
as floats; comparisons allow a relative error of 1e-9 so sums of requests such as
0.1 + 0.2 still fit into 0.3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from edl_common.quantity import QuantityError, parse_quantity

GPU = "nvidia.com/gpu"
RESOURCE_NAMES = ("cpu", "memory", GPU)
"""The resources the sizer counts, by their Kubernetes names (others are ignored)."""
_EPSILON = 1e-9


class ResourceError(ValueError):
    """A resource amount is not a valid non-negative Kubernetes quantity."""


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of CPU (cores), memory (bytes) and GPUs (devices)."""

    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0

    @classmethod
    def parse(cls, quantities: Mapping[str, object] | None) -> Resources:
        """From a Kubernetes resource map (``{"cpu": "500m", "memory": "1Gi"}``).

        Raises:
            ResourceError: an amount is not a quantity or is negative.
        """
        if not quantities:
            return cls()
        values: dict[str, float] = {}
        for name in RESOURCE_NAMES:
            raw = quantities.get(name)
            if raw is None:
                continue
            try:
                value = parse_quantity(raw if isinstance(raw, str | int | float) else str(raw))
            except QuantityError as e:
                raise ResourceError(f"{name}: {e}") from e
            if value < Decimal(0):
                raise ResourceError(f"{name}: {raw!r} is negative")
            values[name] = float(value)
        return cls(values.get("cpu", 0.0), values.get("memory", 0.0), values.get(GPU, 0.0))

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu)

    def scaled(self, factor: float) -> Resources:
        """Every amount times ``factor``."""
        return Resources(self.cpu * factor, self.memory * factor, self.gpu * factor)

    def maximum(self, other: Resources) -> Resources:
        """The larger amount of each resource (how init containers combine with the rest)."""
        return Resources(
            max(self.cpu, other.cpu), max(self.memory, other.memory), max(self.gpu, other.gpu)
        )

    def clamped(self) -> Resources:
        """Negative amounts (an over-committed node) as zero."""
        return Resources(max(0.0, self.cpu), max(0.0, self.memory), max(0.0, self.gpu))

    def fits_in(self, room: Resources) -> bool:
        """Whether this amount fits into ``room`` (every resource).

        `_le` for each resource, written out: the decision asks this hundreds of thousands of
        times a round at 5,000 nodes.
        """
        have = room.cpu
        if not self.cpu <= have + _EPSILON * (
            have if have > 1.0 else -have if have < -1.0 else 1.0
        ):
            return False
        have = room.memory
        if not self.memory <= have + _EPSILON * (
            have if have > 1.0 else -have if have < -1.0 else 1.0
        ):
            return False
        have = room.gpu
        return self.gpu <= have + _EPSILON * (have if have > 1.0 else -have if have < -1.0 else 1.0)

    @property
    def is_zero(self) -> bool:
        """No CPU, memory or GPU at all (a BestEffort pod)."""
        return self.cpu <= 0 and self.memory <= 0 and self.gpu <= 0

    def dominant_share(self, total: Resources) -> float:
        """The largest fraction of ``total`` this amount takes (Dominant Resource Fairness).

        A resource the cluster has none of counts as a full share when asked for, so a GPU
        request in a cluster without GPUs is as expensive as it gets (1.0 or more).
        """
        share = 0.0
        for need, have in (
            (self.cpu, total.cpu),
            (self.memory, total.memory),
            (self.gpu, total.gpu),
        ):
            if need > 0:
                share = max(share, need / have if have > 0 else 1.0)
        return share

    def describe(self) -> str:
        """Short human form: ``2 CPUs, 4 GiB, 1 GPU`` (zero amounts left out)."""
        parts = []
        if self.cpu > _EPSILON:
            parts.append(f"{_num(self.cpu)} CPU" + ("" if abs(self.cpu - 1) < _EPSILON else "s"))
        if self.memory > _EPSILON:
            parts.append(f"{_num(self.memory / 2**30)} GiB")
        if self.gpu > _EPSILON:
            parts.append(f"{_num(self.gpu)} GPU" + ("" if abs(self.gpu - 1) < _EPSILON else "s"))
        return ", ".join(parts) or "nothing"

    def to_dict(self) -> dict[str, float]:
        """``{"cpu": cores, "memory": bytes, "nvidia.com/gpu": devices}``."""
        return {"cpu": float(self.cpu), "memory": float(self.memory), GPU: float(self.gpu)}


def _le(need: float, have: float) -> bool:
    return need <= have + _EPSILON * max(1.0, abs(have))


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")
