"""Pods (their JSON, as the reflector passes them) to scrape targets and owner chains."""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from metrics_adapter.scraping.pod_registry import OwnerRef, PodKey, PodRegistry
from metrics_adapter.scraping.sources.kubernetes import (
    KubernetesPodDiscovery,
    OwnerResolver,
    pod_target,
)
from metrics_adapter.scraping.store import MetricStore, Sample
from metrics_adapter.selfmetrics import AdapterMetrics
from tests.unit.metrics_adapter.helpers import ManualClock

ANNOTATION = "edl.paddlepaddle.org/metrics-port"


def pod(
    name: str = "t-0",
    phase: str = "Running",
    ip: str | None = "10.1.2.3",
    port: str | None = None,
    owner_kind: str = "ReplicaSet",
    deleting: bool = False,
) -> dict[str, Any]:
    """The pod's JSON as the API server sends it (built from the client's model)."""
    model = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name=name,
            namespace="ml",
            uid="u-1",
            labels={"app": "trainer"},
            annotations={ANNOTATION: port} if port else None,
            owner_references=[
                k8s.V1OwnerReference(
                    api_version="apps/v1",
                    kind=owner_kind,
                    name="trainer-7d9f",
                    uid="rs-1",
                    controller=True,
                )
            ],
            deletion_timestamp=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
            if deleting
            else None,
        ),
        spec=k8s.V1PodSpec(containers=[], node_name="node-1"),
        status=k8s.V1PodStatus(phase=phase, pod_ip=ip),
    )
    body: dict[str, Any] = k8s.ApiClient().sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    return body


def test_running_pod_becomes_a_target() -> None:
    t = pod_target(pod(), (), 9400, ANNOTATION, "/metrics")
    assert t is not None
    assert (t.namespace, t.name, t.uid, t.node) == ("ml", "t-0", "u-1", "node-1")
    assert t.scrape_url == "http://10.1.2.3:9400/metrics"
    other_port = pod_target(pod(port="9500"), (), 9400, ANNOTATION, "/metrics")
    assert other_port is not None and str(other_port.scrape_url).endswith(":9500/metrics")
    v6 = pod_target(pod(ip="fd00::1"), (), 9400, ANNOTATION, "/m")
    assert v6 is not None and v6.scrape_url == "http://[fd00::1]:9400/m"


def test_pending_unaddressed_or_deleting_pods_are_not_targets() -> None:
    assert pod_target(pod(phase="Pending"), (), 9400, ANNOTATION, "/metrics") is None
    assert pod_target(pod(ip=None), (), 9400, ANNOTATION, "/metrics") is None
    assert pod_target(pod(deleting=True), (), 9400, ANNOTATION, "/metrics") is None


class Apps:
    """The AppsV1Api seam: one ReplicaSet owned by Deployment `trainer`."""

    def __init__(self) -> None:
        self.calls = 0

    def read_namespaced_replica_set(self, name: str, namespace: str, **_: Any) -> k8s.V1ReplicaSet:
        self.calls += 1
        return k8s.V1ReplicaSet(
            spec=k8s.V1ReplicaSetSpec(selector=k8s.V1LabelSelector()),
            metadata=k8s.V1ObjectMeta(
                name=name,
                namespace=namespace,
                owner_references=[
                    k8s.V1OwnerReference(
                        api_version="apps/v1",
                        kind="Deployment",
                        name="trainer",
                        uid="d-1",
                        controller=True,
                    )
                ],
            ),
        )


def test_owner_chain_pod_replicaset_deployment_is_cached() -> None:
    apps = Apps()
    resolver = OwnerResolver(apps)
    owners = resolver.owners(pod())
    assert owners == (
        OwnerRef("ReplicaSet", "apps", "trainer-7d9f", "rs-1"),
        OwnerRef("Deployment", "apps", "trainer", "d-1"),
    )
    assert owners[1].resource == "deployments.apps"
    resolver.owners(pod("t-1"))
    assert apps.calls == 1
    assert resolver.owners(pod(owner_kind="StatefulSet")) == (
        OwnerRef("StatefulSet", "apps", "trainer-7d9f", "rs-1"),
    )


def test_watch_events_update_registry_and_store() -> None:
    pods, store = PodRegistry(), MetricStore(4, 60, ManualClock())
    discovery = KubernetesPodDiscovery(
        k8s.ApiClient(),
        pods,
        store,
        AdapterMetrics(CollectorRegistry()),
        "app=trainer",
        "ml",
        9400,
        ANNOTATION,
    )
    discovery._owners = OwnerResolver(Apps())
    discovery.apply("ADDED", pod())
    assert pods.get(PodKey("ml", "t-0")) is not None
    store.ingest(PodKey("ml", "t-0"), [Sample("x", {}, 1.0)])
    discovery.apply("MODIFIED", pod(phase="Failed"))
    assert pods.get(PodKey("ml", "t-0")) is None
    assert store.pods() == []
    discovery.apply("ADDED", pod())
    discovery.apply("DELETED", pod())
    assert len(pods) == 0
