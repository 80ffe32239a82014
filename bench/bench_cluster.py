"""What EDL does to a cluster: the shipped scenarios under every policy, side by side.

Each scenario (``edl_sim.cluster.scenarios``: EDL 2018 cases 1 and 2, a Philly
GPU trace) runs under ``static``, ``hpa-throughput``, ``edl-2018`` and ``edl`` with the same
inputs and seed; the bench prints each scenario's table (every figure, and its ratio to
``static``), the issue's goals as ratios (met or missed, by how much), and the wall time.
Extra arguments after ``--`` are ``edl-sim run`` options (e.g. ``-- --prior-kappa 0``), so a
proposed sizer setting can be measured the same way. Figures are printed, never asserted.

    python bench/bench_cluster.py [--plots docs/img] [--json FILE] [-- EDL-SIM-OPTIONS]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edl_sim.cluster import load_workload, scenarios
from edl_sim.cluster.cli import compare, parse_run_args, settings_from
from edl_sim.cluster.plot import write_plot
from edl_sim.cluster.policies import POLICIES
from edl_sim.cluster.report import Figures, figures, ratio, table, to_json


@dataclass(frozen=True)
class Goal:
    """``figure`` of ``policy`` against ``baseline`` (a ratio), or absolute when no baseline."""

    text: str
    figure: str
    bound: float
    baseline: str | None = None
    policy: str = "edl"
    at_least: bool = False

    def check(self, by: dict[str, Figures]) -> str:
        value = getattr(by[self.policy], self.figure)
        if self.baseline is not None:
            value = ratio(value, getattr(by[self.baseline], self.figure))
        if value is None:
            return f"  {self.text}: n/a"
        met = value >= self.bound if self.at_least else value <= self.bound
        shown = f"{value:.3f}" if self.baseline is not None else f"{value:.1f}"
        need = (">=" if self.at_least else "<=") + f" {self.bound:g}"
        verdict = "met" if met else f"MISSED by {abs(value - self.bound):.3g}"
        return f"  {self.text}: {shown} (goal {need}): {verdict}"


GOALS = {
    "edl2018-case1": (
        Goal("pending, edl / static", "pending_mean_s", 0.15, "static"),
        Goal("utilisation, edl / static (equal: >= 0.95)", "utilisation_mean", 0.95, "static",
             at_least=True),
    ),
    "edl2018-case2": (
        Goal("utilisation, edl / static", "utilisation_mean", 1.35, "static", at_least=True),
        Goal("off-peak utilisation, edl / static", "utilisation_off_peak", 1.75, "static",
             at_least=True),
        Goal("mean job pending of edl, s", "pending_mean_s", 10.0),
    ),
    "gpu-philly": (
        Goal("mean JCT, edl / static", "jct_mean_s", 0.60, "static"),
        Goal("mean JCT, edl / hpa-throughput", "jct_mean_s", 0.80, "hpa-throughput"),
        Goal("mean JCT, edl / edl-2018", "jct_mean_s", 0.90, "edl-2018"),
        Goal("rescales, edl / edl-2018", "rescales", 0.70, "edl-2018"),
    ),
}  # fmt: skip


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plots", type=Path, help="write cluster-<scenario>.png here")
    parser.add_argument("--json", type=Path, help="write every scenario's figures here")
    parser.add_argument("--only", choices=sorted(scenarios.SCENARIOS), action="append")
    args = parser.parse_args(own)
    names = args.only or list(scenarios.SCENARIOS)
    everything = {}
    started = time.monotonic()
    for name in names:
        scenario = scenarios.SCENARIOS[name]
        with tempfile.TemporaryDirectory() as tmp:
            files = {p.stem: p for p in scenarios.write(name, Path(tmp))}
            run = [x for part, path in files.items() for x in (f"--{part}", str(path))]
            if scenario.window:
                run += ["--window", str(scenario.window)]
            options = parse_run_args([*run, *extra])
            workload = load_workload(
                options.workload, options.curves, options.cluster, options.background
            )
        sim, policy = settings_from(options)
        print(f"== {name}: {scenario.title}", flush=True)
        tick = time.monotonic()
        results = compare(
            workload, list(POLICIES), sim, policy, lambda m: print(f"  {m}", file=sys.stderr)
        )
        wall = time.monotonic() - tick
        all_figures = [figures(r, options.window) for r in results]
        print(table(all_figures))
        print("goals:")
        by = {f.policy: f for f in all_figures}
        for goal in GOALS.get(name, ()):
            print(goal.check(by))
        print(f"wall time: {wall:.1f} s for {len(results)} policies\n", flush=True)
        if args.plots is not None:
            write_plot(results, args.plots / f"cluster-{name}.png", scenario.title, options.window)
        everything[name] = to_json(all_figures)
    print(f"total wall time: {time.monotonic() - started:.1f} s")
    if extra:
        print(f"edl-sim options: {' '.join(extra)}")
    if args.json is not None:
        args.json.write_text(json.dumps(everything, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
