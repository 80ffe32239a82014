"""Seeded clusters for the golden plans: ``decide``'s output must not change by accident.

`cases()` builds the same clusters on every machine (``random.Random(seed)``, no clock):
small and crowded ones that reach every branch of the decision (taints, selectors, nodes
not ready or cordoned, protected pending pods, waiting minimums, displacement, quotas, the
rescale budget, hold-off, bad jobs) and a few large ones (the benchmark's shapes). The
golden file (``golden_plans.json`` beside this module) holds a SHA-256 of each plan's JSON
and a few plans in full, written by the code at the commit that blessed them.

A change that is meant to change decisions re-blesses them, knowingly, and says so in its
commit::

    .venv/bin/python -m tests.unit.edl_sizing.plan_cases --bless

A change that must not (a performance change) leaves the file alone and passes
``tests/unit/edl_sizing/test_plan_golden.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import bench_sizing
from edl_sizing import Job, Node, Plan, Pod, Quota, Resources, SizingPolicy, decide
from edl_sizing.cluster import Taint, Toleration

GI = 2**30
GOLDEN = Path(__file__).with_name("golden_plans.json")
FULL = ("small-0003", "crowded-0007", "gpu-0002", "budget-0001")
"""Cases kept in full in the golden file (so a reader sees what a plan is, and a diff shows
what changed)."""
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")


@dataclass(frozen=True)
class Case:
    """One input of ``decide``."""

    name: str
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    jobs: tuple[Job, ...]
    policy: SizingPolicy
    now: float
    quotas: tuple[Quota, ...] = ()

    def plan(self) -> Plan:
        return decide(self.nodes, self.pods, self.jobs, self.policy, self.now, self.quotas)


def plan_digest(plan: Plan) -> str:
    """SHA-256 of the plan's JSON form (keys sorted): every decision, message and room."""
    return hashlib.sha256(canonical(plan).encode()).hexdigest()


def canonical(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), sort_keys=True, separators=(",", ":"))


def _curve(rnd: random.Random) -> dict[int, float]:
    shape = rnd.choice(("none", "linear", "usl", "flat", "dip", "one"))
    if shape == "none":
        return {}
    if shape == "one":
        return {rnd.choice((1, 2, 4)): 100.0 * rnd.uniform(0.5, 2)}
    sizes = sorted(rnd.sample(range(1, 17), rnd.randint(2, 5)))
    if shape == "linear":
        return {n: 100.0 * n for n in sizes}
    if shape == "flat":
        return {n: 100.0 + 3.0 * n for n in sizes}
    if shape == "dip":
        return {n: 100.0 * n * (0.6 if i == len(sizes) // 2 else 1.0) for i, n in enumerate(sizes)}
    sigma, kappa = rnd.uniform(0, 0.2), rnd.choice((0.0, 0.005, 0.05))
    return {n: 100.0 * n / (1 + sigma * (n - 1) + kappa * n * (n - 1)) for n in sizes}


def _nodes(rnd: random.Random, count: int, gpu_share: float, crowded: bool) -> list[Node]:
    out = []
    for i in range(count):
        gpu = rnd.random() < gpu_share
        if gpu:
            room = Resources(cpu=rnd.choice((32, 48, 64)), memory=256 * GI, gpu=rnd.choice((4, 8)))
        else:
            room = Resources(cpu=rnd.choice((4, 8) if crowded else (16, 32, 64)), memory=128 * GI)
        labels = {"pool": rnd.choice(("a", "b"))}
        if gpu:
            labels["accelerator"] = "gpu"
        taints = (GPU_TAINT,) if gpu and rnd.random() < 0.8 else ()
        if rnd.random() < 0.05:
            taints = (*taints, Taint("maintenance", "", "NoExecute"))
        out.append(
            Node(
                f"node-{i:04d}",
                room,
                ready=rnd.random() > 0.05,
                schedulable=rnd.random() > 0.05,
                taints=taints,
                labels=labels,
            )
        )
    rnd.shuffle(out)  # decide sorts them
    return out


def _worker(rnd: random.Random, gpu: bool) -> Resources:
    if gpu:
        return Resources(cpu=rnd.choice((4, 8)), memory=32 * GI, gpu=rnd.choice((1, 2)))
    return Resources(cpu=rnd.choice((0.5, 1, 2, 4)), memory=rnd.choice((1, 4, 8)) * GI)


def generated(
    name: str,
    seed: int,
    nodes: int,
    jobs: int,
    pods_per_node: float,
    *,
    crowded: bool = False,
    gpu_share: float = 0.0,
    budget: bool = False,
) -> Case:
    """A seeded cluster: nodes, other work (bound and Pending, of several priorities), jobs."""
    rnd = random.Random(seed)
    ns = _nodes(rnd, nodes, gpu_share, crowded)
    names = sorted(n.name for n in ns)
    gpu_names = sorted(n.name for n in ns if n.allocatable.gpu > 0)
    pods: list[Pod] = []
    for i in range(int(nodes * pods_per_node)):
        bound = rnd.random() > 0.15
        tolerations = (GPU_TOLERATION,) if rnd.random() < 0.1 else ()
        selector = {"pool": rnd.choice(("a", "b"))} if rnd.random() < 0.1 else {}
        requests = Resources(
            cpu=rnd.choice((0.1, 0.5, 1, 2, 3)), memory=rnd.choice((0.5, 1, 4)) * GI
        )
        if rnd.random() < 0.03:
            requests = Resources(cpu=1, gpu=1)
        elif rnd.random() < 0.02:
            requests = Resources()  # BestEffort
        pods.append(
            Pod(
                rnd.choice(("web", "batch", "ml")),
                f"other-{i}",
                requests,
                rnd.choice((-10, 0, 0, 100, 1000)),
                rnd.choice(names) if bound else None,
                None,
                tolerations,
                selector,
            )
        )
    js: list[Job] = []
    now = 10_000.0
    for j in range(jobs):
        gpu = bool(gpu_names) and rnd.random() < 0.6
        worker = _worker(rnd, gpu)
        low = rnd.choice((1, 1, 1, 2, 3))
        high = rnd.choice((low, 4, 8, 16, 64))
        replicas = rnd.randint(0, min(high + 2, 12))
        error = (
            "annotation edl.paddlepaddle.org/weight: 'x' is not a number"
            if rnd.random() < 0.03
            else None
        )
        job = Job(
            rnd.choice(("ml", "research")),
            f"job-{j:03d}",
            worker if rnd.random() > 0.02 else Resources(),
            replicas=replicas,
            min_replicas=low if rnd.random() > 0.02 else high + 1,
            max_replicas=high,
            weight=rnd.choice((1.0, 1.0, 2.0, 0.5)),
            min_marginal_speedup=rnd.choice((0.05, 0.05, 0.2)),
            priority=rnd.choice((0, 0, 100, 1000)),
            arrival=float(rnd.randint(0, 9000)),
            last_rescale=rnd.choice((None, now - 10, now - 1000)),
            rescale_pause_s=rnd.choice((0.0, 5.0, 60.0)),
            observed=_curve(rnd),
            requested=rnd.choice((0, replicas, low, high)),
            recent_rescales=rnd.choice((0, 1, 3, 8, 12)) if budget else rnd.choice((0, 0, 1)),
            tolerations=(GPU_TOLERATION,) if gpu else (),
            node_selector={"accelerator": "gpu"}
            if gpu and rnd.random() < 0.5
            else ({"pool": "a"} if rnd.random() < 0.1 else {}),
            error=error,
        )
        js.append(job)
        placeable = gpu_names if gpu else names
        created = max(0, replicas + rnd.choice((0, 0, 0, -1, -2, 1)))  # scaling in progress
        for w in range(created):
            node = rnd.choice(placeable) if rnd.random() > 0.1 else None
            pods.append(
                Pod(job.namespace, f"{job.name}-{w}", job.worker, job.priority, node, job.key)
            )
    rnd.shuffle(pods)  # decide sorts them
    quotas = []
    if rnd.random() < 0.3:
        quotas.append(
            Quota("ml", "compute", {"cpu": rnd.choice((8.0, 64.0, 512.0)), "pods": 200.0})
        )
    if rnd.random() < 0.2:
        quotas.append(Quota("research", "gpus", {"gpu": rnd.choice((0.0, 4.0, 16.0))}))
    policy = rnd.choice(
        (
            SizingPolicy(),
            SizingPolicy(headroom=Resources(cpu=0.5, memory=GI)),
            SizingPolicy(exploration=3.0, rescale_margin=1.0),
            SizingPolicy(hold_off_s=0.0, payback_s=30.0, hysteresis=0.0),
        )
    )
    return Case(name, tuple(ns), tuple(pods), tuple(js), policy, now, tuple(quotas))


def bench_shape(name: str, nodes: int, jobs: int) -> Case:
    """bench/bench_sizing.py's cluster (a change of its generator re-blesses these two)."""
    ns, pods, js = bench_sizing.cluster(nodes, jobs)
    return Case(name, tuple(ns), tuple(pods), tuple(js), SizingPolicy(), 1e9)


def cases() -> Iterator[Case]:
    """Every golden case, in a fixed order."""
    for i in range(120):
        yield generated(
            f"small-{i:04d}", 1000 + i, nodes=3 + i % 12, jobs=1 + i % 7, pods_per_node=3
        )
    for i in range(60):
        yield generated(
            f"crowded-{i:04d}", 2000 + i, nodes=4 + i % 9, jobs=3 + i % 10, pods_per_node=5,
            crowded=True,
        )  # fmt: skip
    for i in range(30):
        yield generated(
            f"gpu-{i:04d}", 3000 + i, nodes=6 + i % 10, jobs=2 + i % 8, pods_per_node=4,
            gpu_share=0.6,
        )  # fmt: skip
    for i in range(20):
        yield generated(
            f"budget-{i:04d}", 4000 + i, nodes=5 + i % 6, jobs=4 + i % 6, pods_per_node=4,
            crowded=i % 2 == 0, budget=True,
        )  # fmt: skip
    for i in range(4):
        yield generated(
            f"medium-{i:04d}", 5000 + i, nodes=150, jobs=40, pods_per_node=8,
            crowded=i % 2 == 1, gpu_share=0.3,
        )  # fmt: skip
    yield bench_shape("bench-100x20", 100, 20)
    yield bench_shape("bench-1000x100", 1000, 100)


def golden(every: Iterable[Case] | None = None, full: tuple[str, ...] = FULL) -> dict[str, Any]:
    """What the code now decides for every case (a golden file's content): each plan's
    digest, and the plans named in `full` whole (a diff then shows what changed)."""
    digests: dict[str, str] = {}
    kept: dict[str, Any] = {}
    for case in cases() if every is None else every:
        plan = case.plan()
        digests[case.name] = plan_digest(plan)
        if case.name in full:
            kept[case.name] = plan.to_dict()
    return {"digests": digests, "plans": kept}


def main(
    path: Path = GOLDEN,
    make: Callable[[], dict[str, Any]] = golden,
    description: str = __doc__.split("\n", 1)[0],
) -> None:
    """``--bless`` rewrites the golden file at `path` from `make()`; without it, says which
    plans differ from it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bless", action="store_true", help=f"rewrite {path.name}")
    args = parser.parse_args()
    data = make()
    if args.bless:
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(data['digests'])} plan digests to {path}")
    else:
        stored = json.loads(path.read_text())["digests"]
        changed = sorted(k for k, v in data["digests"].items() if stored.get(k) != v)
        print(f"{len(changed)} of {len(data['digests'])} plans differ: {changed[:20]}")


if __name__ == "__main__":
    main()
