"""Regenerate trace.csv: GPU demand of a training job, recorded per pod on 4 trainer pods.

Deterministic (fixed seed). The job-level demand in GPUs follows: a quiet start, a ramp when
a second data stream is attached, a plateau with a short input stall, a drop, then a noisy
oscillating phase that tempts the HPA to flap.
"""

from __future__ import annotations

import csv
import math
import random
import sys
from pathlib import Path

PODS = 4
STEP = 15
END = 2400


def demand(t: float, rng: random.Random) -> float:
    """Job-level GPU demand at t seconds."""
    if t < 240:
        base = 2.6
    elif t < 600:
        base = 2.6 + (8.0 - 2.6) * (t - 240) / 360
    elif t < 1200:
        base = 4.0 if 900 <= t < 960 else 8.0
    elif t < 1500:
        base = max(2.0, 8.0 - (t - 1200) / 300 * 6.0)
    else:
        base = 4.5 * (1 + 0.15 * math.sin(2 * math.pi * (t - 1500) / 120))
    return base * (1 + rng.uniform(-0.04, 0.04))


def main(path: Path) -> None:
    """Write the CSV trace to `path`."""
    rng = random.Random(6)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["time_seconds", "metric", "pod", "value"])
        for t in range(0, END + 1, STEP):
            total = demand(t, rng)
            skews = [1 + rng.uniform(-0.05, 0.05) for _ in range(PODS)]
            scale = total / sum(skews)
            for i, skew in enumerate(skews):
                pod = f"resnet-trainer-{i}"
                writer.writerow([t, "gpu_utilization", pod, f"{scale * skew:.3f}"])


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("trace.csv"))
