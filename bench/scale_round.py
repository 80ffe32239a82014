"""A whole sizing round in-process, view built from scratch vs kept from events (printed only).

The cluster of bench/scale_world.py (nodes, 30 pods of other work per node, the jobs'
Deployments) plus each job's workers bound to nodes, filled into two pods' stores the way
the adapter fills them (`pod_from` with shared values): *scratch*, the `RecordStore` whose
records `assemble` attributes every round (the adapter before issue 38's third round), and
*events*, the `PodView` that keeps the attribution from event to event (the adapter now).
Each step runs ``--rounds`` rounds of the real `Sizer.run_once` per side, the sides taking
turns; before each round the same churn goes to both stores as watch events: ``--churn``
pods of other work deleted and as many created, a few job workers gone and new, a few
Deployments' replicas changed. Per side: CPU seconds of the view (`snapshot`), `decide`
(with the history) and the whole round, p50/p99 over the rounds (the first round, the one
that attributes every pod on both sides, is printed apart), and whether both sides saw the
same snapshot and made the same plan in every round (SHA-256 of its JSON).

    .venv/bin/python bench/scale_round.py                    # 500 ... 5,000 nodes
    .venv/bin/python bench/scale_round.py --steps 5000:1000 --rounds 10
    .venv/bin/python bench/scale_round.py --steps 5000:1000 --profile   # the scratch view

``--compare REF`` runs the *scratch* side with the ``metrics_adapter``, ``edl_sizing`` and
``edl_common`` packages of a git ref (``git archive`` into a temporary folder: the adapter's
round as it was there) and the *events* side with this tree's, each step in a fresh process
per side, the same seeded churn, and compares the plans of every round::

    .venv/bin/python bench/scale_round.py --compare main
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: --compare's ref packages come first

from bench import scale_world as world  # noqa: E402
from bench.git_ref import export_packages  # noqa: E402
from edl_sizing import MemoryHistoryStore, SizingPolicy  # noqa: E402
from edl_sizing.capacity import ClusterSnapshot  # noqa: E402
from edl_sizing.cluster import Node  # noqa: E402
from edl_sizing.events import JobEvent  # noqa: E402
from metrics_adapter.kube.reflector import KubeObject, RecordStore  # noqa: E402
from metrics_adapter.kube.shared_values import SharedValues  # noqa: E402
from metrics_adapter.sizing.kube_objects import (  # noqa: E402
    DeploymentRecord,
    JobDefaults,
    PodRecord,
    PriorityClassRecord,
    assemble,
    deployment_from,
    node_from,
    pod_from,
    priority_class_from,
)
from metrics_adapter.sizing.metrics import SizingMetrics  # noqa: E402
from metrics_adapter.sizing.sizer import Sizer  # noqa: E402

if TYPE_CHECKING:
    from metrics_adapter.sizing.pod_view import PodView

STEPS = "500:100,1000:300,2000:300,5000:1000"
T0 = 1_796_000_000.0


def listed(pod: dict[str, Any], n: int) -> KubeObject:
    """A pod as a list or watch returns it (uid, creation time, a status)."""
    meta = pod["metadata"]
    meta["uid"] = f"00000000-0000-4000-8000-{n:012d}"
    meta["creationTimestamp"] = f"2026-12-06T10:{n // 60 % 60:02d}:{n % 60:02d}Z"
    running = "nodeName" in pod["spec"]
    pod["status"] = {"phase": "Running" if running else "Pending"}
    return pod


def worker(j: int, r: int, nodes: int) -> KubeObject:
    """Worker ``r`` of job ``j``, bound to a node of its kind (GPU or CPU)."""
    d = world.job_deployment(j)
    template = d["spec"]["template"]
    spec = dict(template["spec"])
    gpu = world.job_shape(j).gpus > 0
    slot = (j * 5 + r) * 4 % max(4, nodes - nodes % 4)
    spec["nodeName"] = world.node_name(slot + (3 if gpu else 0))
    meta = {"name": f"{d['metadata']['name']}-w{r:03d}", "namespace": d["metadata"]["namespace"],
            "labels": dict(template["metadata"]["labels"])}  # fmt: skip
    return listed({"metadata": meta, "spec": spec}, 10_000_000 + j * 1000 + r)


def pods_of(nodes: int, jobs: int) -> Iterator[KubeObject]:
    n = 0
    for i in range(nodes):
        for pod in world.other_pods(i):
            yield listed(pod, n)
            n += 1
    for j in range(jobs):
        for r in range(world.job_shape(j).replicas):
            yield worker(j, r, nodes)


class Side:
    """One pods' store and the capacity source a `Sizer` reads it through."""

    def __init__(self, name: str, incremental: bool, world_: World) -> None:
        self.name = name
        self.world = world_
        shared = SharedValues()

        def convert(obj: KubeObject) -> PodRecord | None:
            return pod_from(obj, shared)

        self.view: PodView | None = None
        if incremental:  # not in a ref from before it
            from metrics_adapter.sizing.pod_view import PodView

            self.view = PodView(convert)
        self.store: RecordStore[PodRecord] | None = (
            None if incremental else RecordStore(convert, ordered=True)
        )
        self.last: ClusterSnapshot | None = None
        self.parts: list[tuple[float, float, float, float]] = []
        self.digests: list[str] = []
        metrics = Timed(CollectorRegistry(), self.parts)
        self.sizer = Sizer(
            self, MemoryHistoryStore(), SizingPolicy(), metrics, NoEvents(), self.world.clock,
            timer=time.thread_time, cpu_timer=time.thread_time,
        )  # fmt: skip

    @property
    def sink(self) -> PodView | RecordStore[PodRecord]:
        sink = self.view if self.view is not None else self.store
        assert sink is not None
        return sink

    def snapshot(self) -> ClusterSnapshot:
        w = self.world
        deps = list(w.deployments.values())
        if self.view is not None:
            attributed = self.view.attributed(deps)
            self.last = assemble(w.nodes, (), deps, w.classes, JobDefaults(), attributed=attributed)
        else:
            assert self.store is not None
            self.last = assemble(
                w.nodes, self.store.records(), deps, w.classes, JobDefaults(),
                pods_in_key_order=True,
            )  # fmt: skip
        return self.last

    def round(self) -> None:
        published = self.sizer.run_once()
        assert published is not None
        text = json.dumps(published.plan.to_dict(), sort_keys=True, separators=(",", ":"))
        self.digests.append(hashlib.sha256(text.encode()).hexdigest())


class Timed(SizingMetrics):
    """The sizer's metrics, each round's parts kept as well."""

    def __init__(
        self, registry: CollectorRegistry, into: list[tuple[float, float, float, float]]
    ) -> None:
        super().__init__(registry)
        self._into = into

    def timed(self, snapshot_s: float, decide_s: float, round_s: float, cpu_s: float) -> None:
        super().timed(snapshot_s, decide_s, round_s, cpu_s)
        self._into.append((snapshot_s, decide_s, round_s, cpu_s))


class NoEvents:
    def record(self, event: JobEvent) -> None:
        pass


class World:
    """The step's cluster, and the churn between rounds (seeded)."""

    def __init__(self, nodes: int, jobs: int) -> None:
        self.n_nodes, self.n_jobs = nodes, jobs
        self.nodes: list[Node] = []
        for i in range(nodes):
            obj = world.node(i)
            obj.update(world.node_status(i))
            self.nodes.append(node_from(obj))
        self.deployments: dict[int, DeploymentRecord] = {}
        for j in range(jobs):
            d = deployment_from(world.job_deployment(j))
            assert d is not None
            self.deployments[j] = d
        self.classes: list[PriorityClassRecord] = [
            priority_class_from(o) for o in world.priority_classes()
        ]
        self.t = T0
        self.rnd = random.Random(38)
        self.generation = 0
        self.others: list[tuple[int, int, int]] = [
            (i, k, 0) for i in range(nodes) for k in range(world.PODS_PER_NODE)
        ]
        self.workers = {j: world.job_shape(j).replicas for j in range(jobs)}
        self.serial = 20_000_000

    def clock(self) -> float:
        return self.t

    def churn(self, pods: int) -> list[tuple[str, KubeObject]]:
        """The next round's watch events (the same list goes to both sides)."""
        self.t += 10.0
        self.generation += 1
        events: list[tuple[str, KubeObject]] = []
        for _ in range(pods):
            at = self.rnd.randrange(len(self.others))
            i, k, g = self.others[at]
            events.append(("DELETED", world.other_pod(i, k, g)))
            self.others[at] = (i, k, self.generation)
            self.serial += 1
            events.append(("ADDED", listed(world.other_pod(i, k, self.generation), self.serial)))
        for _ in range(max(1, pods // 20)):
            j = self.rnd.randrange(self.n_jobs)
            n = self.workers[j]
            if n > 1 and self.rnd.random() < 0.5:
                events.append(("DELETED", worker(j, n - 1, self.n_nodes)))
                self.workers[j] = n - 1
            else:
                obj = worker(j, n, self.n_nodes)
                obj["metadata"]["creationTimestamp"] = "2026-12-07T08:00:00Z"
                events.append(("ADDED", obj))
                self.workers[j] = n + 1
        for _ in range(max(1, pods // 10)):
            j = self.rnd.randrange(self.n_jobs)
            obj = world.job_deployment(j)
            obj["spec"]["replicas"] = self.workers[j]
            d = deployment_from(obj)
            assert d is not None
            self.deployments[j] = d
        return events


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def step(nodes: int, jobs: int, rounds: int, churn: int, profile: bool) -> None:
    w = World(nodes, jobs)
    sides = [Side("scratch", False, w), Side("events", True, w)]
    for side in sides:
        side.sink.replace(pods_of(nodes, jobs))
    count = len(sides[0].sink.records())
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        sides[0].snapshot()
        prof.disable()
        print(f"--- the scratch view at {nodes} nodes / {count} pods (cProfile, by own time)")
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    same_view = True
    for r in range(rounds + 1):
        events = w.churn(churn) if r else []
        for side in sides:
            for kind, obj in events:
                side.sink.apply(kind, obj)
        for side in sides if r % 2 == 0 else sides[::-1]:
            side.round()
        same_view = same_view and sides[0].last == sides[1].last
    same = same_view and sides[0].digests == sides[1].digests
    for side in sides:
        row(nodes, count, jobs, side.name, side.parts, same)
    view_ = sides[1].view
    assert view_ is not None
    print(f"{'':>21} events side: {view_.rebuilds} full attribution(s), "
          f"{view_.updated} pods attributed again over {rounds} rounds")  # fmt: skip
    sys.stdout.flush()


def row(nodes: int, pods: int, jobs: int, name: str, parts: list[Any], same: bool) -> None:
    first, rest = parts[0], parts[1:]
    view, decide, total = ([p[x] for p in rest] for x in (0, 1, 3))
    print(f"{nodes:>6} {pods:>7} {jobs:>5} {name:>8} {first[0]:>7.2f} {first[3]:>7.2f}   "
          f"{pct(view, .5):>5.3f}/{pct(view, .99):<5.3f}  "
          f"{pct(decide, .5):>5.2f}/{pct(decide, .99):<5.2f}  "
          f"{pct(total, .5):>5.2f}/{pct(total, .99):<5.2f}  "
          f"{'yes' if same else 'NO'}", flush=True)  # fmt: skip


def one_side(nodes: int, jobs: int, rounds: int, churn: int, incremental: bool) -> dict[str, Any]:
    """One side alone (a --compare child): its parts and plan digests, where its code is."""
    import metrics_adapter

    w = World(nodes, jobs)
    side = Side("events" if incremental else "scratch", incremental, w)
    side.sink.replace(pods_of(nodes, jobs))
    count = len(side.sink.records())
    for r in range(rounds + 1):
        for kind, obj in w.churn(churn) if r else []:
            side.sink.apply(kind, obj)
        side.round()
    code = str(Path(metrics_adapter.__file__).parent)
    return {"pods": count, "parts": side.parts, "digests": side.digests, "code": code}


def child(code: Path, nodes: int, jobs: int, args: argparse.Namespace, side: str) -> Any:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys((str(code), str(ROOT))))}
    out = subprocess.run(
        [sys.executable, __file__, "--child", f"{nodes}:{jobs}", "--side", side,
         "--rounds", str(args.rounds), "--churn", str(args.churn)],
        env=env, cwd=ROOT, check=True, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["code"] == str(code / "metrics_adapter"), result["code"]
    return result


def compare(ref: str, steps: list[tuple[int, int]], args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        export_packages(ref, Path(tmp), "metrics_adapter", "edl_sizing", "edl_common")
        print(f"scratch: the adapter at {ref}; events: this tree; one process per side and step")
        for n, j in steps:
            old = child(Path(tmp), n, j, args, "scratch")
            new = child(ROOT, n, j, args, "events")
            same = old["digests"] == new["digests"]
            row(n, old["pods"], j, f"ref {ref}"[:8], old["parts"], same)
            row(n, new["pods"], j, "events", new["parts"], same)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", default=STEPS, help="nodes:jobs,...")
    ap.add_argument("--rounds", type=int, default=8, help="rounds after the first, per side")
    ap.add_argument("--churn", type=int, default=100, help="pods deleted and created per round")
    ap.add_argument("--profile", action="store_true", help="cProfile one scratch view per step")
    ap.add_argument("--compare", metavar="REF", help="the scratch side with REF's adapter")
    ap.add_argument("--child", metavar="NODES:JOBS", help=argparse.SUPPRESS)
    ap.add_argument("--side", choices=("scratch", "events"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    rounds = args.rounds = max(1, min(args.rounds, 100))
    if args.child:
        n, j = (int(x) for x in args.child.split(":"))
        print(json.dumps(one_side(n, j, rounds, args.churn, args.side == "events")))
        return
    steps = [(int(a), int(b)) for a, b in (t.split(":") for t in args.steps.split(","))]
    print(f"CPU seconds per round (thread time), {rounds} rounds per side after the first, "
          f"{args.churn} pods deleted + {args.churn} created between rounds")  # fmt: skip
    print(f"{'nodes':>6} {'pods':>7} {'jobs':>5} {'side':>8} {'1st view':>7} {'1st rnd':>7}   "
          f"{'view p50/p99':<12} {'decide p50/p99':<12} {'round p50/p99':<12} same")  # fmt: skip
    if args.compare:
        compare(args.compare, steps, args)
        return
    for n, j in steps:
        step(n, j, rounds, args.churn, args.profile)


if __name__ == "__main__":
    main()
