"""`make demo-cluster`'s nodes: real kubelets + containerd (the e2e harness's), 1 CPU each.

Three nodes ``edl-node-1..3``, each containerd v2 and a kubelet on a loopback address of its
own (:class:`tests.e2e.harness.kubelet_node.KubeletNodeGroup`). Each reports the whole
machine's CPUs; the kubelet reserves all but one (``systemReserved``), so the cluster has 3
allocatable CPUs, as the story's 3 slots. Every pod runs from EDL's trainer image, imported
into each node's containerd (nothing is pulled) on the host network (the nodes have no CNI): a
pod's IP is its node's address.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.install import ensure_images
from tests.e2e.harness.kubelet_node import (
    KubeletNode,
    KubeletNodeGroup,
    KubeletNodeSettings,
    ensure_node_binaries,
)
from tests.e2e.harness.podrunner import LoopbackAddressPool

NODES = 3
CPU_PER_NODE = "1"


def reserved_of_machine() -> tuple[int, int]:
    """(this machine's CPUs, CPUs each kubelet reserves so that 1 is allocatable)."""
    cpus = os.cpu_count() or 1
    return cpus, cpus - 1


def trainer_image() -> str:
    """`make images` for EDL's trainer image only (instant when its inputs have not changed,
    under the images lock the e2e tests take too): its reference."""
    return ensure_images(names=("trainer",))["trainer"]


class DemoNodes:
    """Starts the kubelet nodes and puts the trainer image in each; stops them all."""

    def __init__(self, cp: ControlPlane, work: Path) -> None:
        bin_dir = ensure_node_binaries()
        pool = LoopbackAddressPool()
        settings = [
            KubeletNodeSettings(
                bin_dir,
                work / f"edl-node-{n}",
                name=f"edl-node-{n}",
                node_ip=pool.take(None),
                allocatable_cpu=CPU_PER_NODE,
            )
            for n in range(1, NODES + 1)
        ]
        self.group = KubeletNodeGroup([KubeletNode(cp, s) for s in settings], work / "images")
        self._by_name = {n.name: n for n in self.group.nodes}

    def start(self) -> None:
        """Every node up and Ready (HarnessError with the logs' tails otherwise)."""
        self.group.start()

    def import_image(self, ref: str) -> dict[str, float]:
        """`ref` into every node's containerd (one `podman save`): node -> seconds."""
        return self.group.import_image(ref)

    def addresses(self) -> str:
        """``edl-node-1 127.x.y.z, ...``."""
        return ", ".join(f"{n.name} {n.ip}" for n in self.group.nodes)

    def log_of(self, pod: dict[str, Any], container: str) -> Path | None:
        """The kubelet's log file of `container` of `pod` (the current run of it), on its node."""
        node = self._by_name.get(str(pod["spec"].get("nodeName")))
        if node is None:
            return None
        meta = pod["metadata"]
        restarts = next(
            (int(s.get("restartCount", 0))
             for s in pod.get("status", {}).get("containerStatuses") or []
             if s.get("name") == container),
            0,
        )  # fmt: skip
        folder = f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
        return node.work / "pod-logs" / folder / container / f"{restarts}.log"

    def log_tails(self) -> str:
        """containerd's and the kubelets' last lines (for a failure's message)."""
        return self.group.log_tails()

    def stop(self) -> None:
        """Kubelets, containers, containerd; their state (GBs of image snapshots) removed, the
        logs kept. Never raises."""
        self.group.stop()
