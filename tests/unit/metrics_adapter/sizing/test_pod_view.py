"""The pods' view kept from watch events is the view `assemble` builds from scratch."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from edl_sizing import decide
from edl_sizing.capacity import ClusterSnapshot
from metrics_adapter.kube.reflector import RecordStore
from metrics_adapter.kube.shared_values import SharedValues
from metrics_adapter.sizing.kube_objects import (
    JOB_LABEL,
    DeploymentRecord,
    JobDefaults,
    PodRecord,
    assemble,
    deployment_from,
    node_from,
    pod_from,
    priority_class_from,
    selector_from,
)
from metrics_adapter.sizing.kueue_objects import MANAGED
from metrics_adapter.sizing.pod_view import PodView

NAMESPACES = ("ml", "web")
APPS = ("a", "b", "c", "d")
NODES = [
    node_from(
        {
            "metadata": {"name": f"n{i}"},
            "status": {
                "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    for i in range(4)
]
CLASSES = [priority_class_from({"metadata": {"name": "high"}, "value": 1000})]


def deployment(rnd: random.Random, namespace: str, name: str) -> DeploymentRecord:
    """A trainer Deployment whose selector matches some of the random pods (overlaps too)."""
    if rnd.random() < 0.7:
        selector: dict[str, Any] = {"matchLabels": {"app": rnd.choice(APPS)}}
    else:
        values = rnd.sample(APPS, 2)
        selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": values}]}
    obj = {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": {JOB_LABEL: rnd.choice((name, "shared"))},
            "creationTimestamp": "2026-12-01T00:00:00Z",
        },
        "spec": {
            "replicas": rnd.randint(1, 4),
            "selector": selector,
            "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}},
        },
    }
    record = deployment_from(obj)
    assert record is not None
    return record


def pod(rnd: random.Random, namespace: str, name: str) -> dict[str, Any]:
    """A pod with random labels, node, phase, creation time; some being deleted."""
    meta: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "labels": {"app": rnd.choice(APPS)},
        "creationTimestamp": f"2026-12-0{rnd.randint(1, 7)}T10:00:0{rnd.randint(0, 9)}Z",
    }
    if rnd.random() < 0.1:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
        if rnd.random() < 0.5:
            meta["finalizers"] = [MANAGED]  # releasing: kept, counted for nothing
    spec: dict[str, Any] = {
        "containers": [{"resources": {"requests": {"cpu": rnd.choice(("500m", "1", "2"))}}}]
    }
    if rnd.random() < 0.8:
        spec["nodeName"] = rnd.choice(NODES).name
    phase = rnd.choice(("Running", "Running", "Running", "Pending", "Succeeded"))
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def scratch(store: RecordStore[PodRecord], deps: list[DeploymentRecord]) -> ClusterSnapshot:
    return assemble(NODES, store.records(), deps, CLASSES, JobDefaults(), pods_in_key_order=True)


def kept(view: PodView, deps: list[DeploymentRecord]) -> ClusterSnapshot:
    return assemble(NODES, (), deps, CLASSES, JobDefaults(), attributed=view.attributed(deps))


@pytest.mark.parametrize("seed", range(12))
def test_view_kept_from_events_equals_the_view_from_scratch(seed: int) -> None:
    rnd = random.Random(seed)
    shared = SharedValues()
    store: RecordStore[PodRecord] = RecordStore(lambda o: pod_from(o, shared), ordered=True)
    view = PodView(lambda o: pod_from(o, shared))
    names = [(ns, f"p{i:02d}") for ns in NAMESPACES for i in range(30)]
    first = [pod(rnd, ns, name) for ns, name in names if rnd.random() < 0.6]
    store.replace(first)
    view.replace(first)
    deps = {
        (ns, f"job-{i}"): deployment(rnd, ns, f"job-{i}") for ns in NAMESPACES for i in range(3)
    }
    views = 0
    for step in range(300):
        roll = rnd.random()
        if roll < 0.03:  # a relist
            objects = [pod(rnd, ns, name) for ns, name in names if rnd.random() < 0.5]
            store.replace(objects)
            view.replace(objects)
        elif roll < 0.08:  # a Deployment changes (replicas or selector), comes or goes
            key = (rnd.choice(NAMESPACES), f"job-{rnd.randint(0, 4)}")
            if key in deps and rnd.random() < 0.3:
                del deps[key]
            else:
                deps[key] = deployment(rnd, *key)
        else:
            ns, name = rnd.choice(names)
            kind = rnd.choice(("ADDED", "MODIFIED", "DELETED"))
            obj = pod(rnd, ns, name)
            store.apply(kind, obj)
            view.apply(kind, obj)
        if step % 7 == 0:
            current = list(deps.values())
            rnd.shuffle(current)  # the store's order is not the view's
            expected = scratch(store, current)
            assert kept(view, current) == expected, f"seed {seed}, step {step}"
            assert view.records() == store.records()
            views += 1
    # the view was kept pod by pod between selector changes, not rebuilt every time
    assert view.updated > 0
    assert view.rebuilds < views


def test_a_pod_moving_between_jobs_moves_its_jobs_last_growth() -> None:
    rnd = random.Random(1)
    view = PodView(pod_from)
    a, b = deployment(rnd, "ml", "job-a"), deployment(rnd, "ml", "job-b")
    a = _with_app(a, "a")
    b = _with_app(b, "b")
    old = pod(random.Random(2), "ml", "w0")
    old["metadata"].update(labels={"app": "a"}, creationTimestamp="2026-12-01T00:00:00Z")
    old["status"]["phase"] = "Running"
    old["metadata"].pop("deletionTimestamp", None)
    view.replace([old])
    snap = kept(view, [a, b])
    assert [p.job for p in snap.pods] == ["ml/job-a"]
    assert {j.key: j.last_rescale for j in snap.jobs}["ml/job-a"] is not None
    moved = {**old, "metadata": {**old["metadata"], "labels": {"app": "b"}}}
    view.apply("MODIFIED", moved)
    snap = kept(view, [a, b])
    assert [p.job for p in snap.pods] == ["ml/job-b"]
    growth = {j.key: j.last_rescale for j in snap.jobs}
    assert growth["ml/job-a"] is None
    assert growth["ml/job-b"] is not None
    assert view.rebuilds == 1


def _with_app(d: DeploymentRecord, app: str) -> DeploymentRecord:
    return replace(d, selector=selector_from({"matchLabels": {"app": app}}))


def test_the_kept_view_decides_as_the_view_from_scratch() -> None:
    rnd = random.Random(7)
    objects = [pod(rnd, ns, f"p{i}") for ns in NAMESPACES for i in range(40)]
    store: RecordStore[PodRecord] = RecordStore(pod_from, ordered=True)
    view = PodView(pod_from)
    store.replace(objects)
    view.replace(objects)
    deps = [deployment(rnd, ns, f"job-{i}") for ns in NAMESPACES for i in range(3)]
    view.attributed(deps)
    for obj in objects[:10]:
        store.apply("DELETED", obj)
        view.apply("DELETED", obj)
    a, b = scratch(store, deps), kept(view, deps)
    plan_a = decide(a.nodes, a.pods, a.jobs, now=1e9)
    plan_b = decide(b.nodes, b.pods, b.jobs, now=1e9)
    assert plan_b.to_dict() == plan_a.to_dict()


def test_attributed_pods_cannot_be_counted_in_kueues_queues() -> None:
    view = PodView(pod_from)
    with pytest.raises(ValueError, match="Kueue"):
        assemble(NODES, (), [], CLASSES, attributed=view.attributed([]), queues=[])
