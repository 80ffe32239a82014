"""Node objects with known allocatable, for the pod runner to act as their kubelet.

The loopback cluster has no kubelets: `FakeNodes` registers Node objects (capacity,
allocatable, `Ready=True`), so that the real kube-scheduler binds pods to them; the pod
runner then runs only the pods bound to these nodes. Nodes are cluster-scoped: names carry
the test's namespace, and `remove()` deletes them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness.bodies import as_body


@dataclass(frozen=True)
class NodeSpec:
    """One node: its name and what it can hold."""

    name: str
    cpu: str = "2"
    memory: str = "8Gi"
    pods: str = "110"
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()

    def obj(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "edl.e2e/node": "true",
                    **self.labels,
                },
            },
            "spec": {"taints": list(self.taints)} if self.taints else {},
        }

    def status(self) -> dict[str, Any]:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        amounts = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods}
        return {
            "status": {
                "capacity": amounts,
                "allocatable": amounts,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "the e2e pod runner runs this node's pods",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "v0.0.0-e2e",
                    "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "kubeProxyVersion": "", "machineID": "", "osImage": "", "systemUUID": "",
                },
            }
        }  # fmt: skip


class FakeNodes:
    """Registers the Node objects of `specs` and removes them again."""

    def __init__(self, core: client.CoreV1Api, specs: tuple[NodeSpec, ...]) -> None:
        self.core = core
        self.specs = specs

    @property
    def names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.specs)

    def register(self) -> None:
        """Creates each node (replacing a leftover of the same name) and reports it Ready."""
        for spec in self.specs:
            self._delete(spec.name)
            self.core.create_node(as_body(spec.obj()), _request_timeout=10)
            self.core.patch_node_status(spec.name, spec.status(), _request_timeout=10)
            # The API server taints a new node not-ready; the node lifecycle controller (not
            # run here) lifts it once the kubelet reports Ready: this kubelet is ready now.
            self.core.patch_node(
                spec.name,
                {"spec": {"taints": list(spec.taints) or None}},
                _content_type="application/merge-patch+json",
                _request_timeout=10,
            )

    def remove(self) -> None:
        """Deletes the nodes (never raises: teardown must go on)."""
        for spec in self.specs:
            try:
                self._delete(spec.name)
            except Exception as e:
                print(f"deleting node {spec.name}: {e!r}")

    def _delete(self, name: str) -> None:
        try:
            self.core.delete_node(name, grace_period_seconds=0, _request_timeout=10)
        except ApiException as e:
            if e.status != 404:
                raise
