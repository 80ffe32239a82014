"""`decide` alone at the scale bench's steps, in CPU seconds (printed, never asserted).

The cluster is the counted-operations test's (tests/unit/edl_sizing/test_decide_complexity.py:
30 pods of other work per node, 3 % Pending of which half fit no node, a quarter GPU nodes,
jobs of 1-6 workers placed, half of them GPU jobs), from 500 nodes / 100 jobs to 5,000 nodes /
150,000 pods / 1,000 jobs. CPU time (the best of three) is what a round costs when it has a
core; the wall time beside it shows how crowded the machine was. Run:
``.venv/bin/python bench/scale_decide.py``.

``--compare REF`` times the ``edl_sizing`` package of a git ref (``git archive`` into a
temporary folder) beside this tree's, in the same run: each step runs in a fresh process per
side, the sides taking turns (``--rounds`` times), and the table gives each side's best CPU
time and whether both made the same plan (SHA-256 of its JSON)::

    .venv/bin/python bench/scale_decide.py --compare f38ed68e
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: --compare's ref package comes first

from bench.git_ref import export_packages  # noqa: E402

STEPS: tuple[tuple[int, int], ...] = ((500, 100), (1000, 300), (2000, 300), (5000, 1000))
"""(nodes, jobs), as bench/bench_scale.py's."""


class Measured(TypedDict):
    pods: int
    cpu: list[float]
    wall: list[float]
    digest: str
    code: str
    """Where ``edl_sizing`` was imported from."""


def measure(n: int, j: int, repeat: int) -> Measured:
    """Decides the step's cluster ``repeat`` times with the ``edl_sizing`` on the path."""
    import edl_sizing
    from edl_sizing import decide
    from tests.unit.edl_sizing.test_decide_complexity import cluster

    nodes, pods, jobs = cluster(n, j)
    cpu, wall, digest = [], [], ""
    for _ in range(repeat):
        t, c = time.monotonic(), time.process_time()
        plan = decide(nodes, pods, jobs, now=1e9)
        cpu.append(time.process_time() - c)
        wall.append(time.monotonic() - t)
        text = json.dumps(plan.to_dict(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()
    code = str(Path(edl_sizing.__file__).parent)
    return {"pods": len(pods), "cpu": cpu, "wall": wall, "digest": digest, "code": code}


def child(code: Path, n: int, j: int, repeat: int) -> Measured:
    """`measure` in a fresh process whose ``edl_sizing`` comes from ``code``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys((str(code), str(ROOT))))}
    out = subprocess.run(
        [sys.executable, __file__, "--child", f"{n}:{j}", "--repeat", str(repeat)],
        env=env, cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    result: Measured = json.loads(out.stdout.splitlines()[-1])
    assert result["code"] == str(code / "edl_sizing"), result["code"]
    return result


def compare(ref: str, steps: tuple[tuple[int, int], ...], rounds: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        export_packages(ref, Path(tmp), "edl_sizing")
        print(f"edl_sizing at {ref} (ref) and this tree (new); best CPU s of {rounds} rounds "
              f"x {repeat} decisions, sides taking turns")  # fmt: skip
        print(f"{'nodes':>6} {'pods':>7} {'jobs':>5} {'ref CPU s':>10} {'new CPU s':>10} "
              f"{'x faster':>9} {'ref wall s':>10} {'new wall s':>10} "
              f"{'same plan':>9}")  # fmt: skip
        for n, j in steps:
            runs: dict[str, list[Measured]] = {"ref": [], "new": []}
            for _ in range(rounds):
                runs["ref"].append(child(Path(tmp), n, j, repeat))
                runs["new"].append(child(ROOT, n, j, repeat))
            cpu = {k: min(min(r["cpu"]) for r in v) for k, v in runs.items()}
            wall = {k: min(min(r["wall"]) for r in v) for k, v in runs.items()}
            digests = {r["digest"] for v in runs.values() for r in v}
            pods = runs["new"][0]["pods"]
            print(f"{n:>6} {pods:>7} {j:>5} {cpu['ref']:>10.2f} {cpu['new']:>10.2f} "
                  f"{cpu['ref'] / max(cpu['new'], 1e-9):>9.1f} {wall['ref']:>10.2f} "
                  f"{wall['new']:>10.2f} {'yes' if len(digests) == 1 else 'NO':>9}",
                  flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--compare", metavar="REF", help="time REF's edl_sizing beside this")
    parser.add_argument("--rounds", type=int, default=3, help="turns per side (--compare)")
    parser.add_argument("--repeat", type=int, default=1, help="decisions per process")
    parser.add_argument("--steps", help="NODES:JOBS,... (default: the scale bench's)")
    parser.add_argument("--child", metavar="NODES:JOBS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        n, j = (int(x) for x in args.child.split(":"))
        print(json.dumps(measure(n, j, args.repeat)))
        return
    steps = STEPS
    if args.steps:
        steps = tuple((int(a), int(b)) for a, b in (s.split(":") for s in args.steps.split(",")))
    if args.compare:
        compare(args.compare, steps, args.rounds, args.repeat)
        return
    sys.path.insert(0, str(ROOT))
    print(f"{'nodes':>6} {'pods':>7} {'jobs':>5} {'decide CPU s':>12} {'wall s':>7}")
    for n, j in steps:
        m = measure(n, j, 3)
        cpu, wall = min(m["cpu"]), min(m["wall"])
        print(f"{n:>6} {m['pods']:>7} {j:>5} {cpu:>12.2f} {wall:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
