"""The sizer's memory for more pods than the scale bench can create here (printed, never asserted).

bench/bench_scale.py measures the real adapter behind a real kube-apiserver, but filling that
with 150,000 pods takes hours on 2 shared cores. This measures, in one process, what grows
with the pods in the adapter: the watches' stores, filled the way the adapter fills them
(`metrics_adapter.sizing.cluster_watch.WATCHED`'s decode and convert, pages of 500 as a
list arrives, into the `PodView` the adapter keeps them in), and a round's cluster view
(`assemble` with the pods attributed by the `PodView`, which keeps that attribution), for
the pods of bench/scale_world.py's cluster (with a uid, a managed-fields entry and a
status, as a list returns them). Per step: the process's RSS after
the first list, its peak (VmHWM, the list and a view included), and the time of one view.

    .venv/bin/python bench/scale_memory.py                 # 500 ... 5,000 nodes
    .venv/bin/python bench/scale_memory.py --nodes 500,5000
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import scale_world as world  # noqa: E402
from metrics_adapter.kube.shared_values import SharedValues  # noqa: E402
from metrics_adapter.sizing.cluster_watch import WATCHED  # noqa: E402
from metrics_adapter.sizing.kube_objects import (  # noqa: E402
    DeploymentRecord,
    JobDefaults,
    assemble,
    deployment_from,
    node_from,
    priority_class_from,
)
from metrics_adapter.sizing.pod_view import PodView  # noqa: E402

PAGE = 500


def as_listed(pod: dict[str, Any], n: int) -> dict[str, Any]:
    """A pod as a list returns it: uid, creation time, managed fields, a Running status."""
    meta = pod["metadata"]
    meta["uid"] = f"00000000-0000-4000-8000-{n:012d}"
    meta["creationTimestamp"] = "2026-12-06T10:00:00Z"
    meta["resourceVersion"] = str(1000 + n)
    meta["managedFields"] = [
        {"manager": "bench", "operation": "Update", "fieldsV1": {"f:spec": {}}}
    ]
    running = "nodeName" in pod["spec"]
    pod["status"] = {
        "phase": "Running" if running else "Pending",
        "conditions": [{"type": "Ready", "status": "True"}] if running else [],
        "podIP": f"10.1.{n // 256 % 256}.{n % 256}" if running else None,
    }
    return pod


def pages(nodes: int) -> Iterator[bytes]:
    """The pod list of `nodes` nodes' other work, as JSON pages of `PAGE` pods."""
    batch: list[dict[str, Any]] = []
    n = 0
    for i in range(nodes):
        for pod in world.other_pods(i):
            batch.append(as_listed(pod, n))
            n += 1
            if len(batch) == PAGE:
                yield json.dumps({"kind": "PodList", "items": batch}).encode()
                batch = []
    if batch:
        yield json.dumps({"kind": "PodList", "items": batch}).encode()


def peak_rss() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1]) * 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--nodes", default="500,1000,2000,5000")
    ap.add_argument("--jobs", type=int, default=1000)
    args = ap.parse_args()
    steps = [int(x) for x in args.nodes.split(",") if x]
    proc = psutil.Process()
    pods_row = next(r for r in WATCHED if r.kind == "pods")
    assert pods_row.decode is not None
    decode = pods_row.decode
    shared = SharedValues()
    store = PodView(lambda o: pods_row.convert(o, shared))
    deployments: list[DeploymentRecord] = [
        d for d in (deployment_from(world.job_deployment(j)) for j in range(args.jobs)) if d
    ]
    classes = [priority_class_from(o) for o in world.priority_classes()]
    gc.collect()
    base = proc.memory_info().rss
    print(f"process before the list: {base / 2**20:.0f} MB (interpreter and the adapter's code)")
    print(f"{'nodes':>6} {'pods':>7} {'RSS MB':>7} {'peak MB':>8} {'+MB per 10k pods':>16} "
          f"{'list s':>7} {'view s':>7}")  # fmt: skip
    for nodes in steps:
        t0 = time.monotonic()
        store.replace(obj for page in pages(nodes) for obj in decode(page)["items"])
        listed = time.monotonic() - t0
        node_records = []
        for i in range(nodes):
            obj = world.node(i)
            obj.update(world.node_status(i))
            node_records.append(node_from(obj))
        t0 = time.monotonic()
        view = assemble(
            node_records, (), deployments, classes, JobDefaults(), [],
            attributed=store.attributed(deployments),
        )  # fmt: skip
        viewed = time.monotonic() - t0
        del view
        gc.collect()
        rss = proc.memory_info().rss
        count = len(store.records())
        per = (rss - base) / max(1, count) * 10_000 / 2**20
        print(f"{nodes:>6} {count:>7} {rss / 2**20:>7.0f} {peak_rss() / 2**20:>8.0f} "
              f"{per:>16.1f} {listed:>7.1f} {viewed:>7.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
