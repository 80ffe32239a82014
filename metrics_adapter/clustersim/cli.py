"""``edl-sim``: run a workload on a simulated cluster under sizing policies and compare them.

    edl-sim run --workload W.csv --curves C.csv --cluster N.csv [--background B.csv]
                [--policy static,hpa-throughput,edl-2018,edl] [--seed N] [--json] [--plot P.png]
    edl-sim scenario NAME --out DIR      # write a shipped scenario's input files

Figures go to stdout (a table, or one JSON object with ``--json``); progress to stderr.
Every user error is one line on stderr: exit status 2 for a bad command line, 1 for bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn, TextIO

from metrics_adapter.clustersim import scenarios
from metrics_adapter.clustersim.engine import SimResult, SimSettings, Simulation
from metrics_adapter.clustersim.inputs import SimulationError, Workload, load_workload
from metrics_adapter.clustersim.jobs import PauseModel
from metrics_adapter.clustersim.plot import PlotError, write_plot
from metrics_adapter.clustersim.policies import POLICIES
from metrics_adapter.clustersim.policy import PolicySettings
from metrics_adapter.clustersim.report import figures, table, to_json

PROG = "edl-sim"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _seconds(text: str) -> float:
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds >= 0")
    return value


def _positive(text: str) -> float:
    value = _seconds(text) if text.endswith("s") else _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _share(text: str) -> float:
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def _policies(text: str) -> list[str]:
    names = list(POLICIES) if text == "all" else [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown policy {', '.join(unknown) or repr(text)} (choose from "
            f"{', '.join(POLICIES)}, a comma-separated list, or all)"
        )
    return list(dict.fromkeys(names))


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="simulate a workload under one or more policies")
    files = run.add_argument_group("inputs (CSV, see docs/cluster-simulation.md)")
    files.add_argument("--workload", type=Path, required=True)
    files.add_argument("--curves", type=Path, required=True)
    files.add_argument("--cluster", type=Path, required=True)
    files.add_argument("--background", type=Path)
    run.add_argument(
        "--policy", type=_policies, default=list(POLICIES),
        help=f"{'|'.join(POLICIES)}, a comma-separated list, or all (default: all)",
    )  # fmt: skip
    run.add_argument("--seed", type=int, default=0, help="seeds the rescale pauses (default 0)")
    run.add_argument("--json", action="store_true", help="print one JSON object instead")
    run.add_argument("--plot", type=Path, help="write utilisation and workers over time (PNG)")
    run.add_argument("--title", default="", help="the plot's title")
    run.add_argument(
        "--window", type=_seconds,
        help="average utilisation over [0, WINDOW] s (default: each policy's makespan)",
    )  # fmt: skip
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    cluster = run.add_argument_group("the simulated cluster")
    cluster.add_argument("--start-delay", type=_seconds, default=5.0,
                         help="seconds from binding to Running (default 5)")  # fmt: skip
    cluster.add_argument(
        "--reinit", choices=("in-process", "restart"), default="in-process",
        help="rescale pauses: in-process 0.6-0.9 s up / 0.3 s down; restart 2.9-3.3 / 2.2-3.3",
    )  # fmt: skip
    cluster.add_argument("--pause-up", type=_seconds, help="fixed pause of a scale-up (s)")
    cluster.add_argument("--pause-down", type=_seconds, help="fixed pause of a scale-down (s)")
    cluster.add_argument("--placement", choices=("spread", "pack"), default="spread")
    cluster.add_argument("--preemption", action="store_true",
                         help="higher-priority pods evict lower-priority ones")  # fmt: skip
    cluster.add_argument("--max-time", type=_positive, default=30 * 86400.0)
    hpa = run.add_argument_group("HPAs (hpa-throughput, edl)")
    hpa.add_argument("--hpa-sync-period", type=_positive, default=15.0)
    hpa.add_argument(
        "--no-configurable-tolerance", action="store_true",
        help="Kubernetes < 1.35: ignore per-HPA tolerances (the 10%% flag applies)",
    )  # fmt: skip
    hpa.add_argument("--hpa-throughput-manifest", type=Path)
    hpa.add_argument("--hpa-edl-manifest", type=Path)
    hpa.add_argument(
        "--target-efficiency", type=_share, default=0.8,
        help="hpa-throughput's per-pod target, as a share of one worker's throughput",
    )  # fmt: skip
    edl = run.add_argument_group("the sizer (edl) and the 2018 rule (edl-2018)")
    adapter = PolicySettings()
    defaults = adapter.sizing
    edl.add_argument("--sizing-interval", type=_positive, default=adapter.sizing_interval)
    edl.add_argument("--history-interval", type=_positive, default=adapter.history_interval)
    edl.add_argument("--observe-window", type=_seconds, default=adapter.observe_window)
    edl.add_argument("--hold-off", type=_seconds, default=defaults.hold_off_s)
    edl.add_argument("--payback", type=_seconds, default=defaults.payback_s)
    edl.add_argument("--exploration", type=_positive, default=defaults.exploration)
    edl.add_argument("--rescale-margin", type=_positive, default=defaults.rescale_margin)
    edl.add_argument("--prior-sigma", type=_number, default=defaults.prior.sigma)
    edl.add_argument("--prior-kappa", type=_number, default=defaults.prior.kappa)
    edl.add_argument(
        "--prime-history", action="store_true",
        help="the sizer starts with each job's curve points (default: it measures them)",
    )  # fmt: skip
    edl.add_argument("--max-load-desired", type=_share, default=0.97)
    scenario = sub.add_parser("scenario", help="write a shipped scenario's input files")
    scenario.add_argument("name", choices=sorted(scenarios.SCENARIOS))
    scenario.add_argument("--out", type=Path, required=True, help="folder for the CSV files")
    return parser


def parse_run_args(argv: Sequence[str]) -> argparse.Namespace:
    """The options of ``edl-sim run ARGV`` (for tools that run the simulator themselves)."""
    return _parser().parse_args(["run", *argv])


def settings_from(args: argparse.Namespace) -> tuple[SimSettings, PolicySettings]:
    """The simulation's and the policies' settings from the command line."""
    pauses = PauseModel.for_mode(args.reinit)
    if args.pause_up is not None:
        pauses = replace(pauses, up=(args.pause_up, args.pause_up))
    if args.pause_down is not None:
        pauses = replace(pauses, down=(args.pause_down, args.pause_down))
    sim = SimSettings(
        seed=args.seed,
        start_delay=args.start_delay,
        pauses=pauses,
        placement=args.placement,
        preemption=args.preemption,
        max_time=args.max_time,
        until=args.window or 0.0,
    )
    adapter = PolicySettings().sizing
    sizing = replace(
        adapter,
        hold_off_s=args.hold_off,
        payback_s=args.payback,
        exploration=args.exploration,
        rescale_margin=args.rescale_margin,
        prior=replace(adapter.prior, sigma=args.prior_sigma, kappa=args.prior_kappa),
    )
    policy = PolicySettings(
        hpa_sync_period=args.hpa_sync_period,
        configurable_tolerance=not args.no_configurable_tolerance,
        hpa_throughput_manifest=args.hpa_throughput_manifest,
        hpa_edl_manifest=args.hpa_edl_manifest,
        throughput_target_efficiency=args.target_efficiency,
        sizing_interval=args.sizing_interval,
        history_interval=args.history_interval,
        observe_window=args.observe_window,
        prime_history=args.prime_history,
        sizing=sizing,
        max_load_desired=args.max_load_desired,
    )
    return sim, policy


def compare(
    workload: Workload,
    names: Sequence[str],
    sim: SimSettings,
    policy: PolicySettings,
    progress: Callable[[str], None] | None = None,
) -> list[SimResult]:
    """Run each policy on the same workload and settings."""
    results = []
    for name in names:
        result = Simulation(workload, POLICIES[name](policy), sim, progress).run()
        if progress is not None:
            done = sum(1 for j in result.jobs if j.finished is not None)
            progress(
                f"{name}: done at t={result.end:.0f}s ({done}/{len(result.jobs)} jobs) in "
                f"{result.wall_s:.1f} s, {result.decisions} decisions"
            )
        results.append(result)
    return results


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    workload = load_workload(args.workload, args.curves, args.cluster, args.background)
    sim, policy = settings_from(args)

    def progress(message: str) -> None:
        print(f"{PROG}: {message}", file=err, flush=True)

    results = compare(workload, args.policy, sim, policy, None if args.quiet else progress)
    all_figures = [figures(r, args.window) for r in results]
    if args.json:
        print(json.dumps(to_json(all_figures), sort_keys=True), file=out)
    else:
        print(table(all_figures), file=out)
    if args.plot is not None:
        write_plot(results, args.plot, args.title or args.workload.stem, args.window)
        if not args.quiet:
            progress(f"wrote {args.plot}")
    return 0


def main(
    argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Entry point of ``edl-sim``."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "scenario":
            for path in scenarios.write(args.name, args.out):
                print(path, file=out)
            return 0
        return _run(args, out, err)
    except (SimulationError, PlotError, OSError) as e:
        print(f"{PROG}: error: {e}", file=err)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
