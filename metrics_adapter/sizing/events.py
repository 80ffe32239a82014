"""Events on a job's Deployment: every change the sizer asks for, and every input it refused.

Two adapter replicas decide the same thing: the Event's name is derived from what it says
(namespace, Deployment, its generation, reason, size), so the second replica's create is
an ``AlreadyExists`` and each decision shows once in ``kubectl describe deployment``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

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


class KubernetesEventRecorder:
    """core/v1 Events on the Deployment, deduplicated by name across replicas."""

    def __init__(
        self,
        api_client: Any,
        component: str = "edl-metrics-adapter",
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        from kubernetes import client as k8s

        self._core: Any = k8s.CoreV1Api(api_client)
        self._component = component
        self._clock = clock
        self._logs = LogEventRecorder()

    def record(self, event: JobEvent) -> None:
        """Log it and create the Event (AlreadyExists: the other replica did)."""
        from kubernetes.client.exceptions import ApiException

        self._logs.record(event)
        now = self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event.name, "namespace": event.namespace},
            "involvedObject": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": event.deployment,
                "namespace": event.namespace,
                "uid": event.uid or None,
            },
            "reason": event.reason,
            "message": event.message[:1024],
            "type": "Warning" if event.warning else "Normal",
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(event.namespace, body, _request_timeout=10)
        except ApiException as e:
            if e.status != 409:
                log.warning("cannot create event %s/%s: %s %s", event.namespace, event.name,
                            e.status, e.reason)  # fmt: skip
        except Exception as e:
            log.warning("cannot create event %s/%s: %r", event.namespace, event.name, e)
