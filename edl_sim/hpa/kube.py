"""Model inputs from Kubernetes objects, so a test can feed a real cluster's state to `step()`.

Takes the JSON the API server returns (camelCase, as `kubectl get pods -o json` prints it)
and produces `PodState`s with times in Unix seconds (use the same clock for `now`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from edl_common.quantity import milli_value
from edl_sim.hpa.errors import HpaError
from edl_sim.hpa.replicas import PodPhase, PodState


class PodDecodeError(HpaError):
    """A pod object lacks what the HPA model needs (name, a known phase)."""


def _time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Summed container requests, and `container/resource` entries for ContainerResource."""
    totals: dict[str, int] = {}
    containers = list(spec.get("containers") or [])
    containers += [
        c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    ]
    for container in containers:
        requests = (container.get("resources") or {}).get("requests") or {}
        for resource, quantity in requests.items():
            milli = milli_value(str(quantity))
            totals[resource] = totals.get(resource, 0) + milli
            totals[f"{container.get('name', '')}/{resource}"] = milli
    return totals


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """One pod object -> `PodState` (phase, Ready condition, deletion, start, requests)."""
    metadata = pod.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise PodDecodeError("pod without metadata.name")
    status = pod.get("status") or {}
    try:
        phase = PodPhase(status.get("phase") or "Pending")
    except ValueError as e:
        raise PodDecodeError(f"pod {name}: unknown phase {status.get('phase')!r}") from e
    ready: bool | None = None
    transition: float | None = None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
            transition = _time(condition.get("lastTransitionTime"))
    return PodState(
        name=name,
        phase=phase,
        ready=ready,
        deleting=metadata.get("deletionTimestamp") is not None,
        start_time=_time(status.get("startTime")),
        ready_transition_time=transition,
        requests=_requests(pod.get("spec") or {}),
    )


def pod_states(pods: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> tuple[PodState, ...]:
    """A PodList object (or its `items`) -> `PodState`s in name order."""
    items = (pods.get("items") or []) if isinstance(pods, Mapping) else pods
    return tuple(sorted((pod_state(p) for p in items), key=lambda s: s.name))
