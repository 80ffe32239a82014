"""Sizing events as core/v1 Events on the job's Deployment."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from edl_sizing.events import JobEvent, LogEventRecorder

log = logging.getLogger(__name__)


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
