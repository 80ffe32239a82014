"""Trainer Deployments whose pods the pod runner runs, and HPAs on them."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.e2e.harness.bodies import as_body

METRICS_PORT = 9400
"""The agent's metrics port (docs/metrics-contract.md); every pod has its own 127.x.y.z."""


@dataclass
class TrainerJob:
    """A trainer Deployment of load-generating pods; `set_load` changes what they report."""

    apps: client.AppsV1Api
    namespace: str
    name: str
    load_file: Path
    labels: dict[str, str]

    def set_load(self, samples_per_second: float) -> None:
        """Every pod of the job reports this many samples/s from now on (atomic rewrite).

        The temporary file is per thread: a test and its poller may both set the load, and a
        shared name let one writer's rename take the other's file away.
        """
        tmp = self.load_file.with_name(f".{self.load_file.name}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"samples_per_second": samples_per_second}))
        os.replace(tmp, self.load_file)

    def deployment(self) -> Any:
        return self.apps.read_namespaced_deployment(self.name, self.namespace)

    def spec_replicas(self) -> int:
        return int(self.deployment().spec.replicas)

    def ready_replicas(self) -> int:
        return int(self.deployment().status.ready_replicas or 0)


def loadgen_container(load_file: Path) -> dict[str, Any]:
    """A container whose command the pod runner runs: the metric-emitting trainer stand-in."""
    return {
        "name": "trainer",
        "image": "edl-e2e.invalid/loadgen:local",
        "command": ["python", "-m", "tests.e2e.harness.loadgen"],
        "args": ["--host=$(POD_IP)", f"--port={METRICS_PORT}", f"--load-file={load_file}"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": METRICS_PORT}},
    }


def agent_container(trainer: list[str]) -> dict[str, Any]:
    """A container running the real agent (`edl-agent run`) around a real trainer command."""
    return {
        "name": "trainer",
        "image": "edl-e2e.invalid/edl-agent:local",
        "command": ["edl-agent", "run", "--host=$(POD_IP)", f"--port={METRICS_PORT}", "--"],
        "args": trainer,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": METRICS_PORT}},
    }


def create_trainer_job(
    api: client.ApiClient,
    namespace: str,
    load_dir: Path,
    *,
    name: str = "trainer",
    replicas: int = 1,
    samples_per_second: float = 0.0,
    container: dict[str, Any] | None = None,
    service_account: str | None = None,
) -> TrainerJob:
    """Creates the Deployment (labels `app=trainer`, `job=<name>`) at the given load.

    The pods run the load generator unless `container` says otherwise (then the load file is
    written but nothing reads it). `service_account` sets the pods' `serviceAccountName` (the
    pod runner gives processes no token; a test passes one, e.g. in a `KUBECONFIG` file).
    """
    apps = client.AppsV1Api(api)
    labels = {"app": "trainer", "job": name}
    job = TrainerJob(apps, namespace, name, load_dir / f"{namespace}-{name}.json", labels)
    job.set_load(samples_per_second)
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [container or loadgen_container(job.load_file)],
                },
            },
        },
    }
    if service_account:
        body["spec"]["template"]["spec"]["serviceAccountName"] = service_account
    apps.create_namespaced_deployment(namespace, as_body(body))
    return job


def pods_metric_hpa(
    name: str, target: str, metric: str, average_value: str, *, min_r: int, max_r: int
) -> dict[str, Any]:
    """An autoscaling/v2 HPA on Deployment `target` with one Pods metric (AverageValue)."""
    return _hpa(
        name,
        target,
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": metric},
                "target": {"type": "AverageValue", "averageValue": average_value},
            },
        },
        min_r,
        max_r,
    )


def object_metric_hpa(
    name: str, target: str, metric: str, average_value: str, *, min_r: int, max_r: int
) -> dict[str, Any]:
    """An HPA with one Object metric on `deployments.apps/<target>` (AverageValue target)."""
    return _hpa(
        name,
        target,
        {
            "type": "Object",
            "object": {
                "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                "metric": {"name": metric},
                "target": {"type": "AverageValue", "averageValue": average_value},
            },
        },
        min_r,
        max_r,
    )


def _hpa(name: str, target: str, metric: dict[str, Any], min_r: int, max_r: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": min_r,
            "maxReplicas": max_r,
            "metrics": [metric],
            # Scale-down without the default 5 min window, so a test sees it in seconds.
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
        },
    }


def hpa_conditions(hpa: Any) -> dict[str, tuple[str, str, str]]:
    """HPA condition type -> (status, reason, message)."""
    conds = hpa.status.conditions or []
    return {c.type: (c.status, c.reason or "", c.message or "") for c in conds}


def events_for(core: client.CoreV1Api, namespace: str, kind: str, name: str) -> list[Any]:
    """Events about one object, oldest first."""
    sel = f"involvedObject.kind={kind},involvedObject.name={name}"
    items = core.list_namespaced_event(namespace, field_selector=sel).items
    return sorted(items, key=lambda e: str(e.last_timestamp or e.event_time or ""))
