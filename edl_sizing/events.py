"""Events on a job's Deployment: every change the sizer asks for, and every input it refused.

Two adapter replicas decide the same thing: the Event's name is derived from what it says
(namespace, Deployment, its generation, reason, size), so the second replica's create is
an ``AlreadyExists`` and each decision shows once in ``kubectl describe deployment``.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobEvent:
    """What to tell about one job."""

    namespace: str
    deployment: str
    reason: str
    """``SizingGrow``, ``SizingShrink``, ``SizingWaiting``, ``SizingFallback``."""
    message: str
    warning: bool = False
    uid: str = ""
    generation: int = 0
    """The Deployment's ``metadata.generation`` the decision was made at."""
    desired: int = 0

    @property
    def name(self) -> str:
        """A deterministic Event name: the same decision on two replicas is one Event."""
        key = f"{self.namespace}/{self.deployment}/{self.generation}/{self.reason}/{self.desired}"
        return f"{self.deployment}.edl-sizing.{hashlib.sha256(key.encode()).hexdigest()[:12]}"


class EventRecorder(Protocol):
    """Where job events go."""

    def record(self, event: JobEvent) -> None:
        """Publish one event (never raises)."""
        ...


class LogEventRecorder:
    """Events as log lines only (static capacity sources, tests)."""

    def record(self, event: JobEvent) -> None:
        """Log it."""
        level = logging.WARNING if event.warning else logging.INFO
        log.log(level, "sizing %s/%s %s: %s", event.namespace, event.deployment, event.reason,
                event.message)  # fmt: skip
