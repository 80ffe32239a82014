"""``edl-sim``: run a workload on a simulated cluster under sizing policies and compare them.

    edl-sim run --workload W.csv --curves C.csv --cluster N.csv [--background B.csv]
                [--placements P.csv]
                [--policy static,hpa-throughput,edl-2018,edl] [--seed N] [--json] [--plot P.png]
    edl-sim scenario NAME --out DIR      # write a shipped scenario's input files

Figures go to stdout (a table, or one JSON object with ``--json``); progress to stderr.
Every user error is one line on stderr: exit status 2 for a bad command line, 1 for bad input.
Durations are Kubernetes durations (``1m30s``, ``300ms``) or seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from edl_common.durations import format_duration
from edl_common.error_boundary import EXIT_FAILURE, ErrorExit, run_command
from edl_common.errors import ConfigError
from edl_common.logs import add_log_format_argument, json_chosen, tool_logger
from edl_common.options import (
    PATH,
    SWITCH,
    TEXT,
    Kind,
    Option,
    Parser,
    add_arguments,
    choice,
    duration,
    integer,
    number,
    read,
)
from edl_common.version import edl_version
from edl_sim.cluster import scenarios
from edl_sim.cluster.engine import SimResult, SimSettings, Simulation
from edl_sim.cluster.inputs import SimulationError, Workload, load_workload, scale_arrivals
from edl_sim.cluster.jobs import PauseModel
from edl_sim.cluster.plot import PlotError, write_plot
from edl_sim.cluster.policies import POLICIES
from edl_sim.cluster.policy import PolicySettings
from edl_sim.cluster.report import figures, table, to_json

PROG = "edl-sim"
log = logging.getLogger(PROG)


def _share(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise ConfigError("must be in (0, 1]")
    return value


def _policies(text: str) -> list[str]:
    names = list(POLICIES) if text == "all" else [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise ConfigError(
            f"unknown policy {', '.join(unknown) or repr(text)} (choose from "
            f"{', '.join(POLICIES)}, a comma-separated list, or all)"
        )
    return list(dict.fromkeys(names))


SHARE = Kind("share (0, 1]", _share, "1.5")
POLICY_NAMES = Kind(f"{' | '.join(POLICIES)}, a comma list, or all", _policies, "fastest")
INPUTS = "inputs (CSV, see docs/cluster-simulation.md)"
CLUSTER = "the simulated cluster"
HPAS = "HPAs (hpa-throughput, edl)"
SIZER = "the sizer (edl) and the 2018 rule (edl-2018)"
_POLICY = PolicySettings()
_SIZING = _POLICY.sizing
_SIM = SimSettings()
"""The tables' defaults are these settings' field defaults, written there."""


def _opt(name: str, kind: Kind, default: str | None, help: str, group: str = "") -> Option:
    return Option(name, "--" + name.replace("_", "-"), None, kind, default, help, group)


RUN: tuple[Option, ...] = (
    _opt("workload", PATH, None, "the jobs: arrival, size, work (required)", INPUTS),
    _opt("curves", PATH, None, "each job kind's throughput by size (required)", INPUTS),
    _opt("cluster", PATH, None, "the nodes (required)", INPUTS),
    _opt("background", PATH, None, "other pods that hold capacity", INPUTS),
    _opt(
        "placements",
        PATH,
        None,
        "step times by workers per node: a job's speed then depends on its placement",
        INPUTS,
    ),
    _opt(
        "arrival_scale",
        number(0, above=True),
        "1",
        "multiply every job's submission time by this (0.5: twice the arrival rate)",
        INPUTS,
    ),
    _opt("policy", POLICY_NAMES, "all", "the policies to compare"),
    _opt("seed", integer(), str(_SIM.seed), "seeds the rescale pauses"),
    _opt("json", SWITCH, None, "print one JSON object instead"),
    _opt("plot", PATH, None, "write utilisation and workers over time (PNG)"),
    _opt("title", TEXT, None, "the plot's title (default: the workload file's name)"),
    _opt(
        "window",
        duration(),
        None,
        "average utilisation over [0, WINDOW] (default: each policy's makespan)",
    ),
    _opt("quiet", SWITCH, None, "no progress on stderr"),
    _opt(
        "start_delay",
        duration(allow_zero=True),
        format_duration(_SIM.start_delay),
        "from binding to Running",
        CLUSTER,
    ),
    _opt(
        "reinit",
        choice("in-process", "restart"),
        "in-process",
        "rescale pauses: in-process 0.6-0.9 s up / 0.3 s down; restart 2.9-3.3 / 2.2-3.3",
        CLUSTER,
    ),
    _opt("pause_up", duration(allow_zero=True), None, "fixed pause of a scale-up", CLUSTER),
    _opt("pause_down", duration(allow_zero=True), None, "fixed pause of a scale-down", CLUSTER),
    _opt(
        "placement", choice("spread", "pack"), _SIM.placement, "where the scheduler binds", CLUSTER
    ),
    _opt("preemption", SWITCH, None, "higher-priority pods evict lower-priority ones", CLUSTER),
    _opt(
        "max_time",
        duration(),
        None,
        "simulated time at most; jobs left then are reported unfinished (default: until every "
        "job has finished; a job still left far past that is an error naming it)",
        CLUSTER,
    ),
    _opt(
        "hpa_sync_period",
        duration(),
        format_duration(_POLICY.hpa_sync_period),
        "the HPA controller's sync period",
        HPAS,
    ),
    _opt(
        "no_configurable_tolerance",
        SWITCH,
        None,
        "Kubernetes < 1.35: ignore per-HPA tolerances (the 10% flag applies)",
        HPAS,
    ),
    _opt("hpa_throughput_manifest", PATH, None, "hpa-throughput's HPA (default: built in)", HPAS),
    _opt("hpa_edl_manifest", PATH, None, "edl's HPA (default: built in)", HPAS),
    _opt(
        "target_efficiency",
        SHARE,
        f"{_POLICY.throughput_target_efficiency:g}",
        "hpa-throughput's per-pod target, as a share of one worker's throughput",
        HPAS,
    ),
    _opt(
        "sizing_interval",
        duration(),
        format_duration(_POLICY.sizing_interval),
        "time between sizing decisions",
        SIZER,
    ),
    _opt(
        "history_interval",
        duration(),
        format_duration(_POLICY.history_interval),
        "time between writes of new observations",
        SIZER,
    ),
    _opt(
        "observe_window",
        duration(allow_zero=True),
        format_duration(_POLICY.observe_window),
        "the window a throughput is measured over",
        SIZER,
    ),
    _opt(
        "hold_off",
        duration(allow_zero=True),
        format_duration(_SIZING.hold_off_s),
        "no growth within this time of a job's last growth",
        SIZER,
    ),
    _opt(
        "payback",
        duration(allow_zero=True),
        format_duration(_SIZING.payback_s),
        "a growth must pay back its rescale pause within this",
        SIZER,
    ),
    _opt(
        "exploration",
        number(0, above=True),
        f"{_SIZING.exploration:g}",
        "never grow beyond this multiple of the largest size measured",
        SIZER,
    ),
    _opt(
        "rescale_margin",
        number(0, above=True),
        f"{_SIZING.rescale_margin:g}",
        "a job already growing this round keeps the next worker while it is worth at least "
        "1/this of the best other's (the sizer's SizingPolicy.rescale_margin)",
        SIZER,
    ),
    _opt("prior_sigma", number(0), f"{_SIZING.prior.sigma:g}", "the curve prior's sigma", SIZER),
    _opt("prior_kappa", number(0), f"{_SIZING.prior.kappa:g}", "the curve prior's kappa", SIZER),
    _opt(
        "prime_history",
        SWITCH,
        None,
        "the sizer starts with each job's curve points (default: it measures them)",
        SIZER,
    ),
    _opt(
        "no_class_history",
        SWITCH,
        None,
        "history per job only (default: per job class too, a job's curve being its class)",
        SIZER,
    ),
    _opt(
        "hysteresis",
        number(0),
        f"{_SIZING.hysteresis:g}",
        "a growth must raise the job's predicted speed by at least this share",
        SIZER,
    ),
    _opt(
        "rescale_budget",
        integer(0),
        str(_SIZING.rescale_budget_per_hour),
        "rescales per job per hour after which it neither grows past its request nor gives workers",
        SIZER,
    ),
    _opt(
        "arrival_reserve",
        number(0),
        f"{_SIZING.arrival_reserve:g}",
        "share of the cluster's workers growth beyond requests leaves free for arrivals",
        SIZER,
    ),
    _opt(
        "max_load_desired",
        SHARE,
        f"{_POLICY.max_load_desired:g}",
        "the 2018 rule's load ceiling",
        SIZER,
    ),
)
"""The options of ``edl-sim run`` (`edl_common.options`)."""
REQUIRED = ("workload", "curves", "cluster")


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"{PROG} {edl_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate a workload under one or more policies")
    add_arguments(run, RUN)
    add_log_format_argument(run)
    scenario = sub.add_parser("scenario", help="write a shipped scenario's input files")
    scenario.add_argument("name", choices=sorted(scenarios.SCENARIOS))
    scenario.add_argument("--out", type=Path, required=True, help="folder for the CSV files")
    add_log_format_argument(scenario)
    return parser


def _converted(args: argparse.Namespace) -> argparse.Namespace:
    if args.command != "run":
        return args
    values = read(RUN, vars(args), {})
    missing = [f"--{name}" for name in REQUIRED if values[name] is None]
    if missing:
        raise ConfigError(f"edl-sim run needs {', '.join(missing)}")
    return argparse.Namespace(**{**vars(args), **values})


def parse_run_args(argv: Sequence[str]) -> argparse.Namespace:
    """The options of ``edl-sim run ARGV`` (for tools that run the simulator themselves).

    Raises:
        ConfigError: one line naming the bad option.
    """
    return _converted(_parser().parse_args(["run", *argv]))


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
        preemption=bool(args.preemption),
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
        hysteresis=args.hysteresis,
        rescale_budget_per_hour=args.rescale_budget,
        arrival_reserve=args.arrival_reserve,
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
        prime_history=bool(args.prime_history),
        class_history=not args.no_class_history,
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


def load_from(args: argparse.Namespace) -> Workload:
    """The workload the command line names (with its arrivals scaled)."""
    workload = load_workload(
        args.workload, args.curves, args.cluster, args.background, args.placements
    )
    return scale_arrivals(workload, args.arrival_scale)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    workload = load_from(args)
    sim, policy = settings_from(args)

    def progress(message: str) -> None:
        log.info("%s", message)

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
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Entry point of ``edl-sim`` (`out`, `err`: stdout and stderr when not given)."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr

    def command_line() -> int:
        args = _converted(_parser().parse_args(argv))
        try:  # its only variable is EDL_LOG_FORMAT: any other EDL_* is somebody's typo
            tool_logger(PROG, args.log_format, os.environ, (), stderr)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        if args.command == "scenario":
            for path in scenarios.write(args.name, args.out):
                print(path, file=stdout)
            return 0
        return _run(args, stdout)

    return run_command(
        PROG,
        command_line,
        [ErrorExit((SimulationError, PlotError, OSError), EXIT_FAILURE)],
        stderr,
        json_logs=lambda: json_chosen(sys.argv[1:] if argv is None else argv, os.environ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
