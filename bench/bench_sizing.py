"""Benchmark of the sizer's decision (printed, never asserted).

For clusters of growing size it times, side by side in one run: the pure decision
(`decide`), the cluster view built from Kubernetes JSON (`assemble`: pods matched to their
jobs), and the scaling fit, per round. A round runs every `--sizing-interval` (10 s by
default), so its cost must stay far below that. Nodes of 32 CPUs / 128 GiB; 10 pods per node
of other work (a fifth of them Pending, priority 0 or 1000); jobs of 2-CPU workers, half
of them measured at 3 sizes. Run: ``.venv/bin/python bench/bench_sizing.py``.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from edl_sizing import Job, Node, Pod, Resources, decide, fit_usl
from metrics_adapter.sizing.kube_objects import JOB_LABEL, assemble, deployment_from, pod_from

GI = 2**30
SIZES = ((10, 5), (100, 20), (1000, 100))
"""(nodes, jobs)."""


def cluster(nodes: int, jobs: int, seed: int = 1) -> tuple[list[Node], list[Pod], list[Job]]:
    rnd = random.Random(seed)
    ns = [Node(f"node-{i:05d}", Resources(cpu=32, memory=128 * GI)) for i in range(nodes)]
    pods = []
    for i in range(nodes * 10):
        bound = rnd.random() > 0.2
        pods.append(Pod("web", f"web-{i}", Resources(cpu=rnd.choice([0.5, 1, 2]), memory=GI),
                        rnd.choice([0, 1000]), ns[i % nodes].name if bound else None))  # fmt: skip
    js = []
    for j in range(jobs):
        observed = {n: 100.0 * n / (1 + 0.05 * (n - 1)) for n in (1, 2, 4)} if j % 2 else {}
        job = Job("ml", f"job-{j}", Resources(cpu=2, memory=4 * GI), replicas=2, max_replicas=64,
                  weight=rnd.choice([1.0, 2.0]), observed=observed)  # fmt: skip
        js.append(job)
        for w in range(2):
            pods.append(Pod("ml", f"job-{j}-{w}", job.worker, 0, ns[(j + w) % nodes].name, job.key))
    return ns, pods, js


def kube_json(nodes: int, jobs: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    deps, pods = [], []
    for j in range(jobs):
        deps.append({
            "metadata": {"name": f"job-{j}", "namespace": "ml", "labels": {JOB_LABEL: f"job-{j}"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": f"job-{j}"}},
                     "template": {"spec": {"containers": [
                         {"resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}},
        })  # fmt: skip
    for i in range(nodes * 10):
        app = f"job-{i % jobs}" if i % 5 == 0 else "web"
        pods.append({
            "metadata": {"name": f"p-{i}", "namespace": "ml", "labels": {"app": app},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": f"node-{i % nodes:05d}",
                     "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running"},
        })  # fmt: skip
    return deps, pods


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median milliseconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main() -> None:
    print(f"{'nodes':>6} {'pods':>7} {'jobs':>5} {'decide ms':>10} {'assemble ms':>12} "
          f"{'fit ms/job':>11} {'workers planned':>16}")  # fmt: skip
    for nodes, jobs in SIZES:
        ns, pods, js = cluster(nodes, jobs)
        repeat = 5 if nodes <= 100 else 2
        plan = decide(ns, pods, js, now=1e9)
        decide_ms = timed(partial(decide, ns, pods, js, now=1e9), repeat)
        deps_json, pods_json = kube_json(nodes, jobs)
        deps = [d for d in (deployment_from(o) for o in deps_json) if d]
        records = [r for r in (pod_from(o) for o in pods_json) if r]
        assemble_ms = timed(partial(assemble, ns, records, deps, []), repeat)
        fit_ms = timed(lambda: fit_usl({1: 100.0, 2: 190.0, 4: 350.0}), 200)
        planned = sum(d.desired for d in plan.jobs.values())
        print(f"{nodes:>6} {len(pods):>7} {jobs:>5} {decide_ms:>10.1f} {assemble_ms:>12.1f} "
              f"{fit_ms:>11.3f} {planned:>16}")  # fmt: skip


if __name__ == "__main__":
    main()
