"""Pod deletion -> the world without it, with pods run by real kubelets.

A control plane and two kubelet nodes (tests/e2e/harness: the same as `make e2e-kubelet`), the
elastic digits job from EDL's trainer image (`make images`) as a Deployment of 2 pods, one per
node (tests/e2e/harness/kubelet_trainer.py). Each round: once a world of 2 trains, the newest
pod is deleted (`terminationGracePeriodSeconds` 30: the kubelet sends SIGTERM, the agent
drains and leaves) and the Deployment scaled to 1; then it goes back to 2 for the next round.
Per round:

* ``world``: the delete call -> the world record without the pod (polled every 0.1 s);
* ``gone``: the delete call -> the pod object gone (its container exited, the kubelet's final
  status, the API server's deletion);

min / median / max in seconds over `--rounds`, beside the grace period; printed, never
asserted. Run as root (the kubelet), on a machine where `make e2e-kubelet` runs:

    .venv/bin/python bench/bench_kubelet_pod_deletion.py --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config

from agent.trainer.step_gate import StepGate
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.elastic_job import WorldWatch
from tests.e2e.harness.incluster import kubelet_session_settings
from tests.e2e.harness.install import ensure_images
from tests.e2e.harness.kubelet_node import (
    KubeletNode,
    KubeletNodeGroup,
    KubeletNodeSettings,
    ensure_node_binaries,
)
from tests.e2e.harness.kubelet_trainer import (
    NAME,
    prepare_namespace,
    shared_folder,
    trainer_deployment,
    trainer_pods,
)
from tests.e2e.harness.podrunner import LoopbackAddressPool
from tests.e2e.harness.session import Kubectl, work_root
from tests.support.waiting import wait_for

GRACE_S = 30


def _round(api: client.ApiClient, ns: str, watch: WorldWatch, gen: int) -> tuple[float, float, int]:
    """One deletion; (world s, gone s, the generation trained after it)."""
    kubectl_scale = client.AppsV1Api(api).patch_namespaced_deployment_scale
    kubectl_scale(NAME, ns, {"spec": {"replicas": 2}})
    gen = wait_for(lambda: watch.training_at(2, gen, 3), timeout_s=300, what="a world of 2")
    victim = trainer_pods(api, ns)[-1]
    ip, name = victim.status.pod_ip, victim.metadata.name
    core = client.CoreV1Api(api)
    t0 = time.monotonic()
    core.delete_namespaced_pod(name, ns)
    kubectl_scale(NAME, ns, {"spec": {"replicas": 1}})

    def without_it() -> bool:
        hosts = {m["host"] for m in watch.record().get("members") or []}
        return bool(hosts) and ip not in hosts

    wait_for(without_it, timeout_s=GRACE_S + 30, interval_s=0.1, what="the world without it")
    world = time.monotonic() - t0
    wait_for(
        lambda: name not in {p.metadata.name for p in trainer_pods(api, ns)},
        timeout_s=GRACE_S + 30,
        interval_s=0.1,
        what="the pod gone",
    )
    gone = time.monotonic() - t0
    gen = wait_for(lambda: watch.training_at(1, gen, 1), timeout_s=120, what="a world of 1")
    return world, gone, gen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = work_root()
    # as the kubelet e2e session's: pods get ServiceAccount tokens (the agent's in-cluster client)
    settings = ControlPlaneSettings(bin_dir=ensure_binaries(), work_dir=work)
    cp = ControlPlane(kubelet_session_settings(settings))
    pool = LoopbackAddressPool()
    bin_dir = ensure_node_binaries()
    group = KubeletNodeGroup(
        [
            KubeletNode(
                cp,
                KubeletNodeSettings(
                    bin_dir, work / f"node-{n}", name=f"edl-node-{n}", node_ip=pool.take(None)
                ),
            )
            for n in (1, 2)
        ],
        work / "node-images",
    )
    image = ensure_images()["trainer"]
    try:
        cp.start()
        cp.start_scheduler()
        group.start()
        t0 = time.monotonic()
        took = group.import_image(image)
        print(f"{image}: podman save + import {time.monotonic() - t0:.1f} s; per node {took}")
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))  # type: ignore[no-untyped-call]
        kubectl = Kubectl(shutil.which("kubectl") or "/usr/bin/kubectl", cp.kubeconfig)
        ns = f"bench-deletion-{uuid.uuid4().hex[:6]}"
        prepare_namespace(api, cp, kubectl, ns, work)
        shared = shared_folder(work / "shared")
        gate = StepGate(shared / "step-gate")
        gate.allow(0)
        watch = WorldWatch(client.CoreV1Api(api), ns, shared / "ledger", gate=gate)
        body = trainer_deployment(image, shared, cp, replicas=1, grace_s=GRACE_S)
        client.AppsV1Api(api).create_namespaced_deployment(ns, as_body(body))
        gen = wait_for(lambda: watch.training_at(1, 0, 3), timeout_s=300, what="a world of 1")
        worlds, gones = [], []
        for i in range(args.rounds):
            world, gone, gen = _round(api, ns, watch, gen)
            worlds.append(world)
            gones.append(gone)
            print(f"round {i + 1}: world {world:.2f} s, gone {gone:.2f} s")
        for what, xs in (("world", worlds), ("gone", gones)):
            print(
                f"{what}: min {min(xs):.2f} s, median {statistics.median(xs):.2f} s, "
                f"max {max(xs):.2f} s over {len(xs)} rounds (grace period {GRACE_S} s)"
            )
    finally:
        group.stop()
        cp.stop()


if __name__ == "__main__":
    main()
