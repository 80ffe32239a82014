"""decide's work grows with the cluster, not with its square (counted operations, never time).

A cluster of N nodes, 30 pods of other work each (3 % Pending: half would fit, half fit no
node), and jobs with workers placed. With the jobs fixed, 4 N nodes may cost the decision
about 4 times the work of N (room arithmetic and fit checks counted), not 16 times, which
searching every node for each pod that fits nowhere would cost (issue 38: 20-30x the time
for 5x the nodes); with jobs growing as the nodes, no more than nodes x jobs.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from edl_sizing import Job, Node, Pod, Resources, decide
from edl_sizing.cluster import Taint, Toleration

GI = 2**30
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
TOLERATE_GPU = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)


def cluster(n: int, jobs_count: int, seed: int = 5) -> tuple[list[Node], list[Pod], list[Job]]:
    rnd = random.Random(seed)
    nodes = []
    for i in range(n):
        gpu = i % 4 == 3
        room = Resources(cpu=rnd.choice((32, 48, 64)), memory=256 * GI, gpu=8 if gpu else 0)
        nodes.append(Node(f"node-{i:05d}", room, taints=(GPU_TAINT,) if gpu else ()))
    pods = []
    for i in range(n):
        for k in range(30):
            pending = rnd.random() < 0.03
            cpu = 96.0 if pending and rnd.random() < 0.5 else rnd.choice((0.1, 0.5, 1.0, 2.0))
            node = None if pending else nodes[i].name
            pods.append(Pod("web", f"w-{i}-{k}", Resources(cpu=cpu, memory=GI), 0, node))
    jobs = []
    gpu_nodes = [x.name for x in nodes if x.allocatable.gpu]
    for j in range(jobs_count):
        gpu = j % 2 == 0
        worker = Resources(cpu=8, memory=32 * GI, gpu=1) if gpu else Resources(cpu=4, memory=GI)
        replicas = rnd.randint(1, 6)
        job = Job("ml", f"job-{j}", worker, replicas=replicas, max_replicas=16,
                  observed={1: 100.0, 2: 190.0, 4: 350.0}, requested=replicas,
                  tolerations=TOLERATE_GPU if gpu else ())  # fmt: skip
        jobs.append(job)
        for w in range(replicas):
            node = rnd.choice(gpu_nodes) if gpu else rnd.choice(nodes).name
            pods.append(Pod("ml", f"job-{j}-{w}", worker, 0, node, job.key))
    return nodes, pods, jobs


def counted_work(n: int, jobs: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Room arithmetic and fit checks one decision makes of ``n`` nodes and ``jobs`` jobs."""
    calls: Counter[str] = Counter()

    def counting(name: str) -> object:
        original = getattr(Resources, name)

        def wrapper(self: Resources, other: Resources) -> object:
            calls[name] += 1
            return original(self, other)

        return wrapper

    nodes, pods, sized = cluster(n, jobs)
    with monkeypatch.context() as m:
        for name in ("fits_in", "__add__", "__sub__"):
            m.setattr(Resources, name, counting(name))
        decide(nodes, pods, sized, now=1e9)
    return sum(calls.values())


def test_four_times_the_nodes_and_pods_is_about_four_times_the_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 20 jobs throughout; the pods that fit nowhere grow with the nodes.
    work = {n: counted_work(n, 20, monkeypatch) for n in (200, 800)}
    ratio = work[800] / work[200]
    assert ratio < 5.0, f"work {work}: x{ratio:.1f} for 4x the nodes and pods"


def test_the_work_grows_no_faster_than_nodes_times_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nodes and jobs both x4: nodes x jobs x16. Growth into a full cluster may search the
    # nodes for room for each job (the goal allows that much), never more.
    work = {n: counted_work(n, n // 5, monkeypatch) for n in (100, 400)}
    ratio = work[400] / work[100]
    assert ratio < 16.0, f"work {work}: x{ratio:.1f} for 16x nodes x jobs"
