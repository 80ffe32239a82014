"""What `/readyz` answers: ready or not, and in words why not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Readiness:
    """One readiness verdict; `reason` is shown to whoever probes `/readyz`."""

    ready: bool
    reason: str


ReadinessCheck = Callable[[], Readiness]
"""Anything that can say whether the agent is ready (the supervisor is one)."""
