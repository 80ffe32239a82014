"""Exception types of the HPA model and its tools, so callers can tell bad input from bugs."""

from __future__ import annotations

from edl_common.quantity import QuantityError

__all__ = [
    "HpaError",
    "ManifestError",
    "MetricUnavailable",
    "QuantityError",
    "TraceError",
]


class HpaError(Exception):
    """Base of every error the HPA simulator raises on purpose."""


class ManifestError(HpaError):
    """The HPA manifest is not a valid `autoscaling/v2` HorizontalPodAutoscaler.

    The message names the offending field (`spec.metrics[0].pods.target.averageValue`) so an
    admin can fix the file without reading a traceback.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class TraceError(HpaError):
    """A metric trace (file or Prometheus answer) cannot be read as samples."""


class MetricUnavailable(HpaError):
    """One metric of an HPA cannot produce a replica proposal this sync.

    The real controller turns this into a `ScalingActive=False` condition with `reason`; the
    model keeps the reason so its decisions can be compared with the real one.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
