"""A one-node cluster simulated on this machine: CPU slots, the trainer Deployment, other work.

What Kubernetes would do, in a few lines each:

* the **ReplicaSet** part: the trainer Deployment's pods follow ``replicas`` (the HPA sets it);
  on scale-down the Pending pods go first, then the newest (as the ReplicaSet picks them);
* the **scheduler**: Pending pods are bound, highest priority first, when their CPU fits the
  node; a terminating pod keeps its slot until its process has exited. It never preempts (a
  PriorityClass with ``preemptionPolicy: Never``): room for higher-priority work is made by
  the sizer shrinking the job, which is what the demo is about.

The sizer reads this cluster from a capacity file (``--sizing-capacity static``) and the
adapter scrapes the agents listed in a pods file (``--source static``); :class:`ClusterFiles`
rewrites both (atomically, only on change) whenever the cluster changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from examples.demo.view import TRAINER, PodView

JOB_LABEL = "edl.paddlepaddle.org/job"


@dataclass(frozen=True)
class JobSpec:
    """The elastic job: its Deployment and what the sizer may give it."""

    namespace: str = "ml"
    name: str = "digits"
    """The job label's value (what the HPA's metric selector names)."""
    deployment: str = "digits-trainer"
    min_workers: int = 1
    max_workers: int = 3
    worker_cpu: int = 1

    @property
    def key(self) -> str:
        """``namespace/name``, as the sizer keys jobs."""
        return f"{self.namespace}/{self.name}"


@dataclass
class SimPod:
    """A pod of the simulated cluster."""

    name: str
    cpu: int
    priority: int = 0
    workload: str | None = None
    """Other work's name (None: a worker of the job)."""
    node: str | None = None
    """Bound to this node; None while Pending."""
    terminating: bool = False
    address: str | None = None
    """host:port of a worker's agent once it runs."""

    @property
    def is_worker(self) -> bool:
        """A pod of the trainer Deployment."""
        return self.workload is None


@dataclass
class SimulatedCluster:
    """One node with ``slots`` CPUs, the trainer Deployment's pods and other workloads."""

    job: JobSpec
    slots: int = 3
    node: str = "laptop"
    replicas: int = 1
    """The trainer Deployment's ``spec.replicas`` (what the HPA writes)."""
    pods: list[SimPod] = field(default_factory=list)
    _next_worker: int = 0

    def workers(self) -> list[SimPod]:
        """The trainer Deployment's pods, oldest first."""
        return [p for p in self.pods if p.is_worker]

    def add_workload(self, name: str, count: int, cpu: int, priority: int) -> None:
        """Creates ``count`` Pending pods ``<name>-<i>``."""
        for i in range(count):
            self.pods.append(SimPod(f"{name}-{i}", cpu, priority, workload=name))

    def remove_workload(self, name: str) -> None:
        """The workload's pods end (their slots free at once: nothing runs in them)."""
        self.pods = [p for p in self.pods if p.workload != name]

    def workload_bound(self, name: str) -> bool:
        """Every pod of the workload runs on the node."""
        mine = [p for p in self.pods if p.workload == name]
        return bool(mine) and all(p.node is not None for p in mine)

    def remove(self, name: str) -> None:
        """A pod is gone (its process exited)."""
        self.pods = [p for p in self.pods if p.name != name]

    def free_slots(self) -> int:
        """CPUs of the node that no bound pod (terminating ones included) holds."""
        return self.slots - sum(p.cpu for p in self.pods if p.node is not None)

    def pod_views(self) -> list[PodView]:
        """The pods as the frame counts them."""
        return [
            PodView(TRAINER if p.is_worker else str(p.workload), p.cpu, p.node is not None,
                    p.terminating, p.priority)
            for p in self.pods
        ]  # fmt: skip

    def reconcile(self) -> None:
        """One pass of the ReplicaSet and the scheduler."""
        live = [p for p in self.workers() if not p.terminating]
        for _ in range(self.replicas - len(live)):
            name = f"{self.job.deployment}-{self._next_worker}"
            self._next_worker += 1
            self.pods.append(SimPod(name, self.job.worker_cpu))
        if len(live) > self.replicas:
            # Pending first, then the newest: what the ReplicaSet deletes.
            order = sorted(live, key=lambda p: (p.node is not None, -self.pods.index(p)))
            for p in order[: len(live) - self.replicas]:
                if p.node is None:
                    self.pods.remove(p)
                else:
                    p.terminating = True
        pending = [p for p in self.pods if p.node is None]
        for p in sorted(pending, key=lambda p: -p.priority):
            if p.cpu <= self.free_slots():
                p.node = self.node

    def capacity_doc(self) -> dict[str, Any]:
        """What the sizer reads (the format of ``--sizing-capacity-file``).

        Terminating pods are left out, as the Kubernetes source leaves out pods being deleted.
        """
        pods = []
        for p in self.pods:
            if p.terminating:
                continue
            entry: dict[str, Any] = {
                "namespace": self.job.namespace,
                "name": p.name,
                "requests": {"cpu": str(p.cpu)},
                "priority": p.priority,
            }
            if p.node is not None:
                entry["node"] = p.node
            if p.is_worker:
                entry["job"] = self.job.key
            pods.append(entry)
        job = {
            "namespace": self.job.namespace,
            "name": self.job.name,
            "replicas": self.replicas,
            "worker": {"cpu": str(self.job.worker_cpu)},
            "minReplicas": self.job.min_workers,
            "maxReplicas": self.job.max_workers,
        }
        node = {"name": self.node, "allocatable": {"cpu": str(self.slots)}}
        return {"nodes": [node], "pods": pods, "jobs": [job]}

    def pods_doc(self) -> dict[str, Any]:
        """The agents the adapter scrapes (the format of ``--static-file``)."""
        return {
            "pods": [
                {
                    "namespace": self.job.namespace,
                    "name": p.name,
                    "labels": {"app": "trainer", JOB_LABEL: self.job.name},
                    "deployment": self.job.deployment,
                    "node": p.node,
                    "address": p.address,
                }
                for p in self.workers()
                if p.address is not None and not p.terminating
            ]
        }


class ClusterFiles:
    """Writes the capacity and pods files when the cluster's view of them changed."""

    def __init__(self, capacity: Path, pods: Path) -> None:
        self.capacity = capacity
        self.pods = pods
        self._written: dict[Path, str] = {}

    def write(self, cluster: SimulatedCluster) -> None:
        """Rewrites what changed, each file by an atomic rename (readers never see half)."""
        for path, doc in ((self.capacity, cluster.capacity_doc()), (self.pods, cluster.pods_doc())):
            text = yaml.safe_dump(doc, sort_keys=False)
            if self._written.get(path) == text:
                continue
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            self._written[path] = text
