"""More workloads of the dev set's kind, to check that a sizer change holds beyond six.

Each is 160 jobs drawn without replacement from the union of a dev set's workloads (each
job keeps its own arrival, request, limits and work), sorted by arrival, written as
``workload-SEED.csv`` beside a copy of the set's ``curves.csv``, ``cluster.csv`` and
``placements.csv``; ``bench_cluster.py --dev-set OUT`` then runs them. They are new mixes
of the same jobs, not new samples of the Philly trace (that needs the trace itself).

    python bench/dev_set_mix.py DEV_SET OUT SEED [SEED ...]
"""

from __future__ import annotations

import argparse
import csv
import random
import shutil
from pathlib import Path

JOBS = 160


def mix(folder: Path, out: Path, seeds: list[int]) -> list[Path]:
    """Write one mixed workload per seed into ``out``; returns their paths."""
    rows: list[dict[str, str]] = []
    for path in sorted(folder.glob("workload-*.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                rows.append({**row, "name": f"{path.stem.removeprefix('workload-')}-{row['name']}"})
    if len(rows) < JOBS:
        raise SystemExit(f"{folder}: {len(rows)} jobs in its workloads, need {JOBS}")
    out.mkdir(parents=True, exist_ok=True)
    for name in ("curves.csv", "cluster.csv", "placements.csv"):
        if (folder / name).exists():
            shutil.copyfile(folder / name, out / name)
    written = []
    for seed in seeds:
        picked = random.Random(seed).sample(rows, JOBS)
        picked.sort(key=lambda r: float(r["submit_seconds"]))
        path = out / f"workload-{seed}.csv"
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, list(rows[0]))
            writer.writeheader()
            writer.writerows(picked)
        written.append(path)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dev_set", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("seeds", type=int, nargs="+")
    args = parser.parse_args()
    for path in mix(args.dev_set, args.out, args.seeds):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
