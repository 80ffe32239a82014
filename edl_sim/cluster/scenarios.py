"""The shipped scenarios: deterministic generators (fixed seeds) of the simulator's CSV inputs.

* ``edl2018-case1``: the 2018 EDL experiment's special-purpose cluster: 133 nodes x 16 CPU,
  20 jobs of 5-CPU / 8 Gi trainers asking 2-60 (static: 60), submitted 10 s apart.
* ``edl2018-case2``: its general-purpose cluster: the same nodes, 6 jobs asking 15 trainers
  (2-60 when elastic) beside a higher-priority service of 3-CPU / 3 Gi pods stepped
  400 -> 300 -> 200 -> 100 -> 200 -> 300 -> 400 every 90 s; utilisation over the 630 s window.
* ``gpu-philly``: 16 nodes x 4 GPUs, 160 jobs over 8 h with sizes and durations drawn from
  the Microsoft Philly statistics, model classes (and their scaling curves) chosen by
  GPU-time as in Pollux's workloads.

The 2018 jobs trained ``recognize_digits``; the curve here is a USL with the shape of a small
model on CPU trainers. Measured points carry +/-5% noise (seeded), as real measurements do.
``examples/cluster/<name>/`` holds the generated files (a test keeps them equal).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

from edl_sim.cluster.inputs import (
    BACKGROUND_COLUMNS,
    CLUSTER_COLUMNS,
    CURVE_COLUMNS,
    WORKLOAD_COLUMNS,
    SimulationError,
)

Files = dict[str, str]
"""File name -> CSV text."""


@dataclass(frozen=True)
class Scenario:
    """A shipped scenario."""

    name: str
    title: str
    generate: Callable[[], Files]
    window: float | None = None
    """The utilisation window (None: each policy's makespan)."""


def _csv(columns: tuple[str, ...], rows: Sequence[tuple[object, ...]], comment: str) -> str:
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    lines.append(",".join(columns))
    lines.extend(",".join(_cell(v) for v in row) for row in rows)
    return "\n".join(lines) + "\n"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.0f}"
    return str(value)


def _usl(lam: float, sigma: float, kappa: float, n: float) -> float:
    return lam * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


def _points(
    rng: random.Random, lam: float, sigma: float, kappa: float, sizes: list[int]
) -> list[tuple[int, float]]:
    return [(n, round(_usl(lam, sigma, kappa, n) * rng.uniform(0.95, 1.05), 1)) for n in sizes]


def _curve_rows(name: str, points: list[tuple[int, float]]) -> list[tuple[object, ...]]:
    return [(name, n, x) for n, x in points]


# -- EDL 2018 ---------------------------------------------------------------------------------

_DIGITS = (100.0, 0.01, 0.0001)
"""lambda (samples/s of one trainer), sigma, kappa of the CPU jobs' scaling."""
_DIGITS_SIZES = [1, 2, 4, 8, 16, 32, 60]
_CPU_CLUSTER = _csv(
    CLUSTER_COLUMNS, [("cpu-node", 133, 16, "64Gi", 0)], "133 nodes x 16 CPU (EDL 2018)"
)


def _digits_curve(seed: int) -> str:
    points = _points(random.Random(seed), *_DIGITS, _DIGITS_SIZES)
    return _csv(
        CURVE_COLUMNS,
        _curve_rows("digits", points),
        f"a small model on CPU trainers: USL lambda={_DIGITS[0]:g} sigma={_DIGITS[1]:g} "
        f"kappa={_DIGITS[2]:g}, +/-5% noise (seed {seed})",
    )


def case1() -> Files:
    """20 jobs, 2-60 trainers (static: 60), 10 s apart; work for ~300 s at 60 trainers."""
    rng = random.Random(2018_1)
    at_60 = _usl(*_DIGITS, 60)
    rows: list[tuple[object, ...]] = []
    for i in range(20):
        work = round(at_60 * 300 * rng.uniform(0.7, 1.3), -3)
        rows.append((f"job-{i + 1:02d}", 10 * i, 2, 60, 60, 5, "8Gi", 0, work, "digits", 0))
    return {
        "workload.csv": _csv(
            WORKLOAD_COLUMNS, rows, "EDL 2018 case 1: 20 jobs asking 2-60 trainers (static: 60)"
        ),
        "curves.csv": _digits_curve(2018_10),
        "cluster.csv": _CPU_CLUSTER,
    }


CASE2_STEPS = (400, 300, 200, 100, 200, 300, 400)
CASE2_STEP_S = 90.0


def case2() -> Files:
    """6 jobs x 15 trainers (2-60 elastic) beside 400 -> 100 -> 400 service pods."""
    rng = random.Random(2018_2)
    at_15 = _usl(*_DIGITS, 15)
    rows: list[tuple[object, ...]] = []
    for i in range(6):
        work = round(at_15 * 1500 * rng.uniform(0.9, 1.1), -3)
        rows.append((f"job-{i + 1:02d}", 10 * (i + 1), 2, 60, 15, 5, "8Gi", 0, work, "digits", 0))
    service = [(CASE2_STEP_S * k, pods, 3, "3Gi", 0, 1000) for k, pods in enumerate(CASE2_STEPS)]
    return {
        "workload.csv": _csv(
            WORKLOAD_COLUMNS, rows, "EDL 2018 case 2: 6 jobs asking 15 trainers (2-60 elastic)"
        ),
        "curves.csv": _digits_curve(2018_20),
        "cluster.csv": _CPU_CLUSTER,
        "background.csv": _csv(
            BACKGROUND_COLUMNS,
            service,
            "a priority-1000 service of 3-CPU / 3 Gi pods: 400 -> 100 -> 400, 90 s a step",
        ),
    }


# -- GPU cluster, Philly ---------------------------------------------------------------------

PHILLY_SIZES = ((1, 93.2), (2, 2.2), (4, 2.3), (8, 2.0), (16, 0.35))
"""GPUs per job and their share (%) in the Philly trace (adaptdl's philly.csv)."""
PHILLY_MEDIAN_S = 1144.0
PHILLY_P90_S = 11266.0
PHILLY_P99_S = 254884.0
PHILLY_CAP_S = 72 * 3600.0
_NORMAL = NormalDist()
_Z90 = _NORMAL.inv_cdf(0.9)
_Z99 = _NORMAL.inv_cdf(0.99)


def philly_duration(u: float) -> float:
    """The job duration (seconds) at quantile ``u`` of the Philly statistics.

    A lognormal through the median and p90, then log-linear in the normal score through p99
    (Philly's tail is heavier than a lognormal's), capped to 60 s..72 h.
    """
    z = _NORMAL.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
    if z <= _Z90:
        sigma = math.log(PHILLY_P90_S / PHILLY_MEDIAN_S) / _Z90
        seconds = PHILLY_MEDIAN_S * math.exp(sigma * z)
    else:
        slope = math.log(PHILLY_P99_S / PHILLY_P90_S) / (_Z99 - _Z90)
        seconds = PHILLY_P90_S * math.exp(slope * (z - _Z90))
    return min(PHILLY_CAP_S, max(60.0, seconds))


_MODELS: Mapping[str, tuple[float, float, float]] = {
    "cifar10": (2000.0, 0.05, 0.01),
    "ncf": (20000.0, 0.08, 0.02),
    "deepspeech2": (30.0, 0.03, 0.004),
    "bert": (60.0, 0.02, 0.002),
    "yolov3": (40.0, 0.02, 0.001),
    "imagenet": (400.0, 0.01, 0.0003),
}
"""Model class -> (samples/s of one GPU, sigma, kappa): poor to good scalers."""


def _class_max(sigma: float, kappa: float) -> int:
    """The largest power of two at which the class still reaches half the ideal speed-up."""
    n = 1
    while n < 64 and _usl(1.0, sigma, kappa, 2 * n) / (2 * n) >= 0.5:
        n *= 2
    return n


def _model_for(gpu_hours: float, rng: random.Random) -> str:
    """Pollux's rule: the class by the job's GPU-time."""
    if gpu_hours < 1:
        return rng.choice(("cifar10", "ncf"))
    if gpu_hours < 10:
        return rng.choice(("deepspeech2", "bert"))
    if gpu_hours < 100:
        return "yolov3"
    return "imagenet"


def gpu_philly() -> Files:
    """160 jobs over 8 h on 16 x 4 GPUs, Philly sizes and durations, Pollux model classes."""
    rng = random.Random(2019_160)
    sizes, weights = zip(*PHILLY_SIZES, strict=True)
    arrivals = sorted(rng.uniform(0, 8 * 3600) for _ in range(160))
    rows: list[tuple[object, ...]] = []
    for i, submit in enumerate(arrivals):
        gpus = rng.choices(sizes, weights)[0]
        duration = philly_duration(rng.random())
        model = _model_for(gpus * duration / 3600, rng)
        lam, s, k = _MODELS[model]
        high = max(gpus, _class_max(s, k))
        work = round(_usl(lam, s, k, gpus) * duration, -2)
        rows.append(
            (f"job-{i + 1:03d}", round(submit, 1), 1, high, gpus, 8, "48Gi", 1, work, model, 0)
        )
    curve_rng = random.Random(2019_7)
    curves: list[tuple[object, ...]] = []
    for model, (lam, s, k) in _MODELS.items():
        top = max(16, _class_max(s, k))
        sizes_measured = [n for n in (1, 2, 4, 8, 16, 32, 64) if n <= top]
        curves.extend(_curve_rows(model, _points(curve_rng, lam, s, k, sizes_measured)))
    return {
        "workload.csv": _csv(
            WORKLOAD_COLUMNS,
            rows,
            "160 jobs over 8 h: GPUs per job and durations (at that size) from the Philly trace\n"
            f"(median {PHILLY_MEDIAN_S:g} s, p90 {PHILLY_P90_S:g} s, p99 {PHILLY_P99_S:g} s; "
            "60 s..72 h);\n"
            "model class by GPU-time as in Pollux; max workers where the class still reaches\n"
            "half the ideal speed-up; min 1",
        ),
        "curves.csv": _csv(
            CURVE_COLUMNS, curves, "per-GPU throughput of the model classes, +/-5% noise"
        ),
        "cluster.csv": _csv(
            CLUSTER_COLUMNS,
            [("gpu-node", 16, 32, "256Gi", 4)],
            "16 nodes x 4 GPUs (Pollux's testbed)",
        ),
    }


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("edl2018-case1", "EDL 2018 case 1: 20 training jobs on 133 x 16 CPU", case1),
        Scenario(
            "edl2018-case2",
            "EDL 2018 case 2: 6 jobs beside a 400 -> 100 -> 400 pod service",
            case2,
            window=CASE2_STEP_S * len(CASE2_STEPS),
        ),
        Scenario("gpu-philly", "160 Philly-like jobs over 8 h on 16 x 4 GPUs", gpu_philly),
    )
}


def write(name: str, out: Path) -> list[Path]:
    """Write the scenario's files into ``out``; returns their paths.

    Raises:
        SimulationError: no such scenario.
    """
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise SimulationError(f"no scenario {name!r} (choose from {', '.join(SCENARIOS)})")
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for file_name, text in scenario.generate().items():
        path = out / file_name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
