"""`decide` alone at the scale bench's steps, in CPU seconds (printed, never asserted).

The cluster is the counted-operations test's (tests/unit/edl_sizing/test_decide_complexity.py:
30 pods of other work per node, 3 % Pending of which half fit no node, a quarter GPU nodes,
jobs of 1-6 workers placed, half of them GPU jobs), from 500 nodes / 100 jobs to 5,000 nodes /
150,000 pods / 1,000 jobs. CPU time (the best of three) is what a round costs when it has a
core; the wall time beside it shows how crowded the machine was. Run:
``.venv/bin/python bench/scale_decide.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edl_sizing import decide  # noqa: E402
from tests.unit.edl_sizing.test_decide_complexity import cluster  # noqa: E402

STEPS = ((500, 100), (1000, 300), (2000, 300), (5000, 1000))
"""(nodes, jobs), as bench/bench_scale.py's."""


def main() -> None:
    print(f"{'nodes':>6} {'pods':>7} {'jobs':>5} {'decide CPU s':>12} {'wall s':>7}")
    for n, j in STEPS:
        nodes, pods, jobs = cluster(n, j)
        cpu, wall = [], []
        for _ in range(3):
            t, c = time.monotonic(), time.process_time()
            decide(nodes, pods, jobs, now=1e9)
            cpu.append(time.process_time() - c)
            wall.append(time.monotonic() - t)
        print(f"{n:>6} {len(pods):>7} {j:>5} {min(cpu):>12.2f} {min(wall):>7.2f}", flush=True)


if __name__ == "__main__":
    main()
