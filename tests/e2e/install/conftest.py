"""The install tests' cluster on the real kubelet nodes, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.image_cluster import (
    ADAPTER_NS,
    TRAINER_NS,
    Cluster,
    kubelet_image_cluster,
)
from tests.e2e.harness.kubelet_node import KubeletNodeGroup
from tests.e2e.harness.podrunner import LoopbackAddressPool


@pytest.fixture(scope="module")
def kubelet_cluster(
    control_plane: ControlPlane,
    kubelet_node_group: KubeletNodeGroup,
    loopback_pool: LoopbackAddressPool,
    edl_images: dict[str, str],
) -> Iterator[Cluster]:
    """EDL's images on the session's kubelet nodes, the adapter's and trainer's namespaces
    made; what a module's tests install is removed after it (the nodes stay up)."""
    proxy_address = str(loopback_pool.network[1])  # .1: never a node's (the pool starts at .2)
    with kubelet_image_cluster(
        control_plane, kubelet_node_group, proxy_address, edl_images, (ADAPTER_NS, TRAINER_NS)
    ) as c:
        yield c
