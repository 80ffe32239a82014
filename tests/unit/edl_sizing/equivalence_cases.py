"""More seeded clusters whose plans must not change when ``decide`` is made faster (issue 38).

The golden plans (`plan_cases`) reach every branch on small clusters; these add the shapes
where the decision's cost lives: the counted-operations test's clusters (30 pods per node,
pods that fit no node, GPU nodes behind a taint, jobs of 1-6 workers placed), the sizing
bench's (jobs that grow to 64 workers: growth spills across many nodes), and crowded
generated ones with many jobs (displacement, claims, requests taken back), under several
policies. ``equivalence_golden.json`` beside this module holds a SHA-256 of each plan's JSON
(every job's replicas, nodes, reason and message, and the room left per node) and a few
plans in full, written by the code before issue 38's speed-ups. Regenerate (only for a
change meant to change decisions, in a commit that says so)::

    .venv/bin/python -m tests.unit.edl_sizing.equivalence_cases --bless
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import bench_sizing
from edl_sizing import Resources, SizingPolicy
from tests.unit.edl_sizing import plan_cases, test_decide_complexity
from tests.unit.edl_sizing.plan_cases import GI, Case, generated

GOLDEN = Path(__file__).with_name("equivalence_golden.json")
FULL = ("many-0001", "pending-0002")
"""Cases kept in full in the golden file (a diff then shows what changed)."""
POLICIES = (
    SizingPolicy(),
    SizingPolicy(headroom=Resources(cpu=0.5, memory=GI), arrival_reserve=0.0),
    SizingPolicy(rescale_margin=1.0, exploration=4.0, hold_off_s=0.0),
    SizingPolicy(arrival_reserve=0.2, hysteresis=0.0, payback_s=30.0),
)


def complexity_case(name: str, nodes: int, jobs: int, seed: int, policy: SizingPolicy) -> Case:
    ns, pods, js = test_decide_complexity.cluster(nodes, jobs, seed)
    return Case(name, tuple(ns), tuple(pods), tuple(js), policy, 1e9)


def bench_case(name: str, nodes: int, jobs: int, seed: int, policy: SizingPolicy) -> Case:
    ns, pods, js = bench_sizing.cluster(nodes, jobs, seed)
    return Case(name, tuple(ns), tuple(pods), tuple(js), policy, 1e9)


def cases() -> Iterator[Case]:
    """Every case, in a fixed order."""
    for i, (n, j) in enumerate(((60, 12), (120, 30), (200, 60), (300, 100), (90, 45))):
        for seed in (1, 2):
            policy = POLICIES[(i + seed) % len(POLICIES)]
            yield complexity_case(f"complexity-{n}x{j}-s{seed}", n, j, seed, policy)
    for i, (n, j) in enumerate(((40, 12), (100, 40), (250, 60), (30, 30))):
        for seed in (2, 3):
            policy = POLICIES[(i + seed) % len(POLICIES)]
            yield bench_case(f"bench-{n}x{j}-s{seed}", n, j, seed, policy)
    for i in range(16):
        case = generated(
            f"many-{i:04d}", 7000 + i, nodes=20 + 7 * i, jobs=15 + 3 * i, pods_per_node=6,
            crowded=i % 3 == 0, gpu_share=(0.0, 0.3, 0.6)[i % 3], budget=i % 4 == 1,
        )  # fmt: skip
        yield replace(case, policy=POLICIES[i % len(POLICIES)]) if i % 2 else case
    for i in range(8):
        yield generated(
            f"pending-{i:04d}", 8000 + i, nodes=12 + 4 * i, jobs=6 + 2 * i, pods_per_node=14,
            crowded=i % 2 == 0, gpu_share=0.25,
        )  # fmt: skip
    yield complexity_case("complexity-1000x200-s3", 1000, 200, 3, POLICIES[2])
    yield bench_case("bench-600x300-s4", 600, 300, 4, POLICIES[2])


def golden() -> dict[str, Any]:
    """What the code now decides for every case (the golden file's content)."""
    return plan_cases.golden(cases(), FULL)


if __name__ == "__main__":
    plan_cases.main(GOLDEN, golden, __doc__.split("\n", 1)[0])
