"""Pod objects as the API server returns them -> model inputs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from edl_sim.hpa.kube import PodDecodeError, pod_state, pod_states
from edl_sim.hpa.replicas import PodPhase

POD_LIST = {
    "kind": "PodList",
    "items": [
        {
            "metadata": {"name": "trainer-b", "deletionTimestamp": "2026-11-29T10:00:05Z"},
            "spec": {"containers": [{"name": "agent", "resources": {"requests": {"cpu": "500m"}}}]},
            "status": {"phase": "Running"},
        },
        {
            "metadata": {"name": "trainer-a"},
            "spec": {
                "containers": [
                    {"name": "agent", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "trainer", "resources": {"requests": {"cpu": "1"}}},
                ],
                "initContainers": [
                    {
                        "name": "sidecar",
                        "restartPolicy": "Always",
                        "resources": {"requests": {"cpu": "100m"}},
                    },
                    {"name": "setup", "resources": {"requests": {"cpu": "4"}}},
                ],
            },
            "status": {
                "phase": "Running",
                "startTime": "2026-11-29T10:00:00Z",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": "2026-11-29T10:00:02Z",
                    }
                ],
            },
        },
    ],
}


def test_pod_list_to_states() -> None:
    a, b = pod_states(POD_LIST)
    start = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC).timestamp()
    assert (a.name, a.phase, a.ready, a.deleting) == ("trainer-a", PodPhase.RUNNING, True, False)
    assert (a.start_time, a.ready_transition_time) == (start, start + 2)
    assert a.requests["cpu"] == 1600  # both containers plus the restartable init container
    assert a.requests["trainer/cpu"] == 1000
    assert a.requests["memory"] == 1024**3 * 1000
    assert (b.name, b.deleting, b.ready) == ("trainer-b", True, None)


def test_pending_without_status_and_bad_input() -> None:
    assert pod_state({"metadata": {"name": "p"}}).phase is PodPhase.PENDING
    with pytest.raises(PodDecodeError, match="unknown phase"):
        pod_state({"metadata": {"name": "p"}, "status": {"phase": "Sleeping"}})
    with pytest.raises(PodDecodeError, match=r"metadata\.name"):
        pod_state({"metadata": {}})
