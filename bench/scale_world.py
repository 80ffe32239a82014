"""The cluster of bench/bench_scale.py, as Kubernetes objects (seeded, the same on every run).

A step has ``nodes`` nodes and ``jobs`` elastic jobs:

* **Nodes** (``scale-00000`` ...): a quarter are GPU nodes (4 or 8 ``nvidia.com/gpu``, tainted
  ``nvidia.com/gpu=present:NoSchedule``), the rest CPU nodes; 32, 48 or 64 CPUs each,
  128-512 GiB, room for 110 pods, a pod CIDR each. kwok (``kwok.x-k8s.io/node: fake``) keeps
  them Ready and runs the pods bound to them.
* **Other work**: `PODS_PER_NODE` pods per node in namespaces ``work-00`` ... ``work-19``
  (100m-2 CPUs, 128Mi-2Gi; on GPU nodes some take a GPU), a tenth of them of the
  PriorityClass ``edl-bench-high`` (1000). 3 % are Pending: they name a scheduler nobody
  runs (``edl-bench-none``), half of them small (they would fit), half asking for more
  than any node has (they never fit): the sizer must keep room for the first kind and
  must not search the cluster for the second on every round.
* **Jobs** (``job-0000`` ... in ``jobs-0`` ... ``jobs-9``): Deployments with the job label,
  3/5 of them GPU jobs (1-2 GPUs, 8 CPUs a worker, tolerating the GPU taint), the rest
  CPU jobs (4 CPUs); 1-8 replicas, at most 4-32 workers; an HPA each on the External
  metric ``desired_replicas`` (AverageValue 1), as docs/sizing.md shows. Their pods are
  created by the ReplicaSet controller and bound by the real kube-scheduler.
* **Scraped jobs**: the first `SCRAPED_JOBS` jobs are CPU jobs whose pods carry
  ``app=trainer`` (the adapter's ``--pod-selector``) and go to the *loop pool*: the CPU
  nodes among the first `LOOP_POOL` nodes, whose pod CIDRs are on the loopback network
  (``127.86.<i>.0/24``), so the adapter really scrapes them (at ``metrics_port``, where
  the bench serves the metrics contract for every address). The other jobs' agents are not
  scraped: this bench measures the cluster view, not 5,000 scrapes.

The ``pod`` bodies are what churn creates too. Only object bodies here: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

JOB_LABEL = "edl.paddlepaddle.org/job"
PODS_PER_NODE = 30
WORK_NAMESPACES = tuple(f"work-{i:02d}" for i in range(20))
JOB_NAMESPACES = tuple(f"jobs-{i}" for i in range(10))
HIGH = "edl-bench-high"
JOB_PRIORITY = "edl-bench-jobs"
NOBODY = "edl-bench-none"
"""A scheduler name nobody serves: the pods naming it stay Pending."""
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
SCRAPED_JOBS = 10
LOOP_POOL = 12
METRICS_PORT_ANNOTATION = "edl.paddlepaddle.org/metrics-port"
TRAINER_IMAGE = "edl-bench.invalid/trainer:none"
"""Never pulled: kwok runs no containers."""


def node_name(i: int) -> str:
    return f"scale-{i:05d}"


def job_name(j: int) -> str:
    return f"job-{j:04d}"


def job_namespace(j: int) -> str:
    return JOB_NAMESPACES[j % len(JOB_NAMESPACES)]


def is_gpu_node(i: int) -> bool:
    return i % 4 == 3


def in_loop_pool(i: int) -> bool:
    return i < LOOP_POOL and not is_gpu_node(i)


@dataclass(frozen=True)
class NodeShape:
    cpu: int
    memory_gi: int
    gpus: int


def node_shape(i: int) -> NodeShape:
    rnd = random.Random(i)
    gpus = rnd.choice((4, 8)) if is_gpu_node(i) else 0
    return NodeShape(rnd.choice((32, 48, 64)), rnd.choice((128, 256, 512)), gpus)


def node(i: int) -> dict[str, Any]:
    """Node ``i`` as created (its status is kwok's, or `node_status` without kwok)."""
    name = node_name(i)
    shape = node_shape(i)
    loop = in_loop_pool(i)
    spec: dict[str, Any] = {
        "podCIDR": f"127.86.{i}.0/24" if loop else f"10.{64 + i // 256}.{i % 256}.0/24"
    }
    if shape.gpus:
        spec["taints"] = [GPU_TAINT]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "edl-bench/pool": "loop" if loop else ("gpu" if shape.gpus else "cpu"),
            },
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        "spec": spec,
    }


def node_status(i: int) -> dict[str, Any]:
    """What kwok reports for node ``i``: capacity, allocatable, Ready."""
    shape = node_shape(i)
    amounts = {"cpu": str(shape.cpu), "memory": f"{shape.memory_gi}Gi", "pods": "110"}
    if shape.gpus:
        amounts[GPU] = str(shape.gpus)
    return {
        "status": {
            "capacity": amounts,
            "allocatable": amounts,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        }
    }


def other_pods(i: int) -> Iterator[dict[str, Any]]:
    """The `PODS_PER_NODE` pods of other work that belong to node ``i``."""
    for k in range(PODS_PER_NODE):
        yield other_pod(i, k)


def other_pod(i: int, k: int, generation: int = 0) -> dict[str, Any]:
    """Pod ``k`` of node ``i`` (``generation`` > 0: a churned replacement)."""
    rnd = random.Random(i * 1000 + k + generation * 7919)
    name = f"w-{i:05d}-{k:02d}" + (f"-g{generation}" if generation else "")
    cpu = rnd.choice(("100m", "250m", "500m", "1", "2"))
    memory = rnd.choice(("128Mi", "256Mi", "1Gi", "2Gi"))
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    spec: dict[str, Any] = {}
    pending = rnd.random() < 0.03
    if is_gpu_node(i) and k < 2 and not pending:
        requests[GPU] = "1"
        spec["tolerations"] = [GPU_TOLERATION]
    if pending:
        spec["schedulerName"] = NOBODY
        if rnd.random() < 0.5:
            requests = {"cpu": "96", "memory": "8Gi"}  # more than any node: never fits
    else:
        spec["nodeName"] = node_name(i)
    if rnd.random() < 0.1:
        spec["priorityClassName"] = HIGH
    spec["containers"] = [
        {
            "name": "work",
            "image": "edl-bench.invalid/work:none",
            "resources": {
                "requests": requests,
                "limits": {k: v for k, v in requests.items() if k == GPU},
            },
        }
    ]
    spec["terminationGracePeriodSeconds"] = 0
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": WORK_NAMESPACES[(i * PODS_PER_NODE + k) % len(WORK_NAMESPACES)],
            "labels": {"app": f"web-{k % 50}", "pod-template-hash": f"{k % 50:x}5d8f9c"},
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class JobShape:
    gpus: int
    replicas: int
    max_workers: int


def job_shape(j: int) -> JobShape:
    rnd = random.Random(10_000_000 + j)
    gpus = rnd.choice((1, 1, 2)) if rnd.random() < 0.6 else 0
    if j < SCRAPED_JOBS:
        return JobShape(0, rnd.randint(1, 4), rnd.choice((4, 8)))
    return JobShape(gpus, rnd.randint(1, 8), rnd.choice((4, 8, 16, 32)))


def job_deployment(j: int, metrics_port: int = 9400) -> dict[str, Any]:
    """Job ``j``'s Deployment (a scraped job's agents answer at ``metrics_port``)."""
    name, shape = job_name(j), job_shape(j)
    if shape.gpus:
        requests = {"cpu": "8", "memory": "32Gi", GPU: str(shape.gpus)}
        limits = {GPU: str(shape.gpus)}
    else:
        requests, limits = {"cpu": "4", "memory": "8Gi"}, {}
    labels = {"edl-bench/job": name}
    annotations: dict[str, str] = {}
    template: dict[str, Any] = {
        "priorityClassName": JOB_PRIORITY,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "trainer",
                "image": TRAINER_IMAGE,
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    if shape.gpus:
        template["tolerations"] = [GPU_TOLERATION]
    if j < SCRAPED_JOBS:
        labels["app"] = "trainer"
        annotations[METRICS_PORT_ANNOTATION] = str(metrics_port)
        template["nodeSelector"] = {"edl-bench/pool": "loop"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": job_namespace(j),
            "labels": {JOB_LABEL: name},
            "annotations": {
                "edl.paddlepaddle.org/min-workers": "1",
                "edl.paddlepaddle.org/max-workers": str(shape.max_workers),
            },
        },
        "spec": {
            "replicas": shape.replicas,
            "selector": {"matchLabels": {"edl-bench/job": name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": template,
            },
        },
    }


def job_hpa(j: int) -> dict[str, Any]:
    """Job ``j``'s HPA on ``desired_replicas`` (docs/sizing.md)."""
    name, shape = job_name(j), job_shape(j)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": job_namespace(j)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": shape.max_workers,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": "desired_replicas",
                            "selector": {"matchLabels": {JOB_LABEL: name}},
                        },
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
        },
    }


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": "Never",
        }
        for name, value in ((HIGH, 1000), (JOB_PRIORITY, 0))
    ]
