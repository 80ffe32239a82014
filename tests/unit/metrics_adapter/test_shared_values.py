"""SharedValues: 150,000 pod records hold one copy of what they have in common."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pytest

from metrics_adapter.kube.shared_values import EMPTY, SharedValues
from metrics_adapter.sizing.kube_objects import pod_from

pytestmark = pytest.mark.unit


def pod(i: int) -> dict[str, Any]:
    """Pods of 5 ReplicaSets on 20 nodes, as the API's JSON (fresh strings each time)."""
    return {
        "metadata": {
            "name": f"web-{i}",
            "namespace": "".join(["web", "-", "ns"]),
            "labels": {"app": f"web-{i % 5}", "pod-template-hash": f"h{i % 5}"},
        },
        "spec": {
            "nodeName": f"node-{i % 20}",
            "containers": [{"resources": {"requests": {"cpu": f"{1 + i % 5}", "memory": "1Gi"}}}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}] if i % 2 else [],
        },
    }


def test_pods_in_common_share_their_namespace_node_requests_tolerations_and_labels() -> None:
    shared = SharedValues()
    records = [pod_from(pod(i), shared) for i in range(1000)]
    assert all(r is not None for r in records)
    pods = [r.pod for r in records if r is not None]
    labels = [r.labels for r in records if r is not None]

    def distinct(values: Sequence[object]) -> int:
        return len({id(v) for v in values})

    assert distinct([p.namespace for p in pods]) == 1
    assert distinct([p.node for p in pods]) == 20
    assert distinct([p.requests for p in pods]) == 5
    assert distinct([p.tolerations for p in pods]) == 2
    assert distinct(labels) == 5
    assert distinct([p.node_selector for p in pods]) == 1 and pods[0].node_selector is EMPTY
    assert distinct([p.name for p in pods]) == 1000  # what is its own stays its own
    assert dict(labels[7]) == {"app": "web-2", "pod-template-hash": "h2"}


def test_a_shared_label_set_cannot_be_changed_through_one_record() -> None:
    record = pod_from(pod(3), SharedValues())
    assert record is not None
    with pytest.raises(TypeError):
        record.labels["app"] = "other"  # type: ignore[index]


def test_the_table_is_emptied_past_its_limit_and_what_was_handed_out_stays_valid() -> None:
    shared = SharedValues(limit=3)
    first = [shared.value((i, "x")) for i in range(3)]
    assert len(shared) == 3
    shared.value((99, "x"))  # a fourth: the table starts again
    assert len(shared) == 1
    again = shared.value((0, "x"))
    assert again == first[0] and again is not first[0]


def test_a_memo_computes_once_per_equal_key() -> None:
    shared = SharedValues()
    computed: list[str] = []

    def compute(value: str) -> str:
        computed.append(value)
        return value.upper()

    for raw in ("100m", "1Gi", "100m", "100m", "1Gi"):
        assert shared.memo(("requests", raw), functools.partial(compute, raw)) == raw.upper()
    assert computed == ["100m", "1Gi"]
