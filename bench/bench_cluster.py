"""What EDL does to a cluster: the shipped scenarios under every policy, side by side.

Each scenario (``edl_sim.cluster.scenarios``: EDL 2018 cases 1 and 2, a Philly
GPU trace) runs under every policy (``static``, ``hpa-throughput``, ``edl-2018``, ``edl``,
``tiresias``, ``optimus``) with the same inputs and seed; the bench prints each scenario's
table (every figure, and its ratio to ``static``), the issue's goals as ratios (met or
missed, by how much), and the wall time. Extra arguments after ``--`` are ``edl-sim run``
options (e.g. ``-- --prior-kappa 0``), so a proposed sizer setting can be measured the same
way. Figures are printed, never asserted.

With ``--dev-set DIR`` (e.g. ``../shared/reference/philly-dev``) it also runs every
``workload-*.csv`` there with the folder's ``curves.csv`` and ``cluster.csv`` under
``static``, ``edl``, ``edl-2018``, ``tiresias`` and ``optimus`` (``--policies`` for fewer),
in each variant asked for (``--variant``, or ``--all-variants``): ``base``, ``placements``
(the folder's ``placements.csv``), ``2x`` and ``placements-2x`` (every submission time x 0.5:
twice the arrival rate). One row per workload and policy: mean and p99 JCT and makespan
against ``static``, rescales per job, the worst job's JCT ratio to its JCT under ``static``
and the share of jobs slower than under ``static``, and for ``edl`` whether the acceptance
holds (mean JCT <= 0.55 of ``static``'s, p99 <= 1.05, at most 5 % of jobs slower, mean JCT
below ``tiresias``' and ``optimus``', at most 4 rescales per job). ``--processes N`` runs N
workloads at a time.

    python bench/bench_cluster.py [--plots docs/img] [--json FILE] [--dev-set DIR
        [--placements | --variant V ... | --all-variants] [--policies P,Q] [--processes N]
        [--no-scenarios]] [-- EDL-SIM-OPTIONS]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edl_sim.cluster import load_workload, scenarios
from edl_sim.cluster.cli import compare, load_from, parse_run_args, settings_from
from edl_sim.cluster.plot import write_plot
from edl_sim.cluster.policies import POLICIES
from edl_sim.cluster.report import (
    Figures,
    Slowdown,
    figure_ratio,
    figures,
    not_comparable,
    slowdown,
    table,
    to_json,
)


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
            why = not_comparable(by[self.policy], by[self.baseline])
            if why is not None:
                return f"  {self.text}: refused ({why})"
            value = figure_ratio(by[self.policy], by[self.baseline], self.figure)
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


DEV_POLICIES = ("static", "edl", "edl-2018", "tiresias", "optimus")
VARIANTS = {
    "base": ([], "without placements"),
    "placements": (["--placements"], "with placements"),
    "2x": (["--arrival-scale", "0.5"], "without placements, twice the arrival rate"),
    "placements-2x": (
        ["--placements", "--arrival-scale", "0.5"],
        "with placements, twice the arrival rate",
    ),
}
"""The dev set's variants (``--variant``): placements on or off, arrivals as given or at twice
the rate (every submission time x 0.5)."""


@dataclass(frozen=True)
class DevRow:
    """One workload of the dev set: every policy's figures and per-job slowdown to static."""

    workload: str
    figures: dict[str, Figures]
    slowdowns: dict[str, Slowdown | None]


def _dev_workload(path: Path, run_args: list[str], policies: tuple[str, ...]) -> DevRow:
    options = parse_run_args(["--workload", str(path), *run_args])
    workload = load_from(options)
    sim, policy = settings_from(options)
    results = {r.policy: r for r in compare(workload, list(policies), sim, policy)}
    base = results["static"]
    return DevRow(
        path.stem,
        {name: figures(r, None) for name, r in results.items()},
        {name: slowdown(r, base) for name, r in results.items() if name != "static"},
    )


def dev_set(
    folder: Path, variant: str, extra: list[str], processes: int = 1,
    policies: tuple[str, ...] = DEV_POLICIES,
) -> dict[str, object]:  # fmt: skip
    """Every workload of the dev set under ``policies`` in one variant: one row per policy."""
    flags, title = VARIANTS[variant]
    shared = ["--curves", str(folder / "curves.csv"), "--cluster", str(folder / "cluster.csv")]
    if "--placements" in flags:
        shared += ["--placements", str(folder / "placements.csv")]
    shared += [f for f in flags if f != "--placements"]
    print(f"== dev set {folder}: {title}", flush=True)
    print("edl-sim run --workload W " + " ".join([*shared, *extra]) + " --policy "
          + ",".join(policies))  # fmt: skip
    header = (
        f"{'workload':<12} {'policy':<9} {'JCT mean':>9} {'x':>6} {'JCT p99':>9} {'x':>6} "
        f"{'makespan':>9} {'x':>6} {'resc/job':>8} {'worst':>6} {'slower':>7}  acceptance"
    )
    print(header)
    print("-" * len(header))
    paths = sorted(folder.glob("workload-*.csv"))
    run_args = [*shared, *extra]
    if processes > 1:
        with concurrent.futures.ProcessPoolExecutor(processes) as pool:
            rows = list(pool.map(_dev_workload, paths, [run_args] * len(paths),
                                 [policies] * len(paths)))  # fmt: skip
    else:
        rows = [_dev_workload(p, run_args, policies) for p in paths]
    out: dict[str, object] = {}
    for row in rows:
        _print_row(row, policies)
        doc = to_json(list(row.figures.values()))
        doc["slowdown_to_static"] = {
            k: v.to_dict() if v is not None else None for k, v in row.slowdowns.items()
        }
        out[row.workload] = doc
    return out


def _print_row(row: DevRow, policies: tuple[str, ...]) -> None:
    base = row.figures["static"]
    for name in policies:
        f = row.figures[name]
        why = not_comparable(f, base)
        if why is not None:
            print(f"{row.workload:<12} {name:<9} no ratio to static: {why}", flush=True)
            continue
        x = {k: figure_ratio(f, base, k) or 0.0 for k in ("jct_mean_s", "jct_p99_s", "makespan_s")}
        slow = row.slowdowns.get(name)
        worst = f"{slow.worst:>6.2f} {slow.slower_share:>7.1%}" if slow else f"{'':>6} {'':>7}"
        verdict = _acceptance(row.figures, row.slowdowns) if name == "edl" else ""
        print(
            f"{row.workload:<12} {name:<9} {f.jct_mean_s or 0:>9.0f} {x['jct_mean_s']:>6.2f} "
            f"{f.jct_p99_s or 0:>9.0f} {x['jct_p99_s']:>6.2f} {f.makespan_s:>9.0f} "
            f"{x['makespan_s']:>6.2f} {f.rescales_per_job:>8.1f} {worst}  {verdict}",
            flush=True,
        )


def _acceptance(by: dict[str, Figures], slow: dict[str, Slowdown | None]) -> str:
    """The issue's acceptance on one workload: met, or what misses."""
    s, e = by["static"], by["edl"]
    mean = figure_ratio(e, s, "jct_mean_s") or 9.0
    checks = [
        ("JCT <= 0.55", mean <= 0.55),
        ("p99 <= 1.05", (figure_ratio(e, s, "jct_p99_s") or 9.0) <= 1.05),
        ("slower <= 5%", (x := slow.get("edl")) is not None and x.slower_share <= 0.05),
        ("rescales <= 4", e.rescales_per_job <= 4),
    ]
    for peer in ("tiresias", "optimus"):
        if peer in by:
            ratio = figure_ratio(e, by[peer], "jct_mean_s")
            checks.append((f"JCT < {peer}", ratio is not None and ratio < 1.0))
    missed = [name for name, ok in checks if not ok]
    return "met" if not missed else "MISSED: " + ", ".join(missed)


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plots", type=Path, help="write cluster-<scenario>.png here")
    parser.add_argument("--json", type=Path, help="write every scenario's figures here")
    parser.add_argument("--only", choices=sorted(scenarios.SCENARIOS), action="append")
    parser.add_argument("--dev-set", type=Path, help="a folder of workload-*.csv to run too")
    parser.add_argument("--placements", action="store_true", help="with the dev set's placements")
    parser.add_argument(
        "--variant", choices=sorted(VARIANTS), action="append",
        help="the dev set's variants to run (default: base, or placements with --placements)",
    )  # fmt: skip
    parser.add_argument("--all-variants", action="store_true", help="every dev-set variant")
    parser.add_argument(
        "--processes", type=int, default=1, help="dev-set workloads simulated in parallel"
    )
    parser.add_argument(
        "--policies",
        help=f"the dev set's policies, comma-separated (default: {','.join(DEV_POLICIES)})",
    )
    parser.add_argument("--no-scenarios", action="store_true", help="only the dev set")
    args = parser.parse_args(own)
    names = [] if args.no_scenarios else (args.only or list(scenarios.SCENARIOS))
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
    if args.dev_set is not None:
        variants = list(VARIANTS) if args.all_variants else args.variant
        variants = variants or (["placements"] if args.placements else ["base"])
        chosen = tuple(args.policies.split(",")) if args.policies else DEV_POLICIES
        if "static" not in chosen:
            chosen = ("static", *chosen)
        for variant in variants:
            key = "dev-set" if variant == "base" else f"dev-set-{variant}"
            everything[key] = dev_set(args.dev_set, variant, extra, args.processes, chosen)
    print(f"total wall time: {time.monotonic() - started:.1f} s")
    if extra:
        print(f"edl-sim options: {' '.join(extra)}")
    if args.json is not None:
        args.json.write_text(json.dumps(everything, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
