"""`edl-hpa`: simulate an HPA over a recorded metric trace, or tune its `behavior`.

Every user error ends as one line on stderr and a non-zero exit status (2 for bad usage,
1 for bad input files or an unreachable Prometheus). Durations are Kubernetes durations
(``1m30s``, ``300ms``) or seconds, as kube-controller-manager's flags take them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
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
    TOGGLE,
    Kind,
    Option,
    Parser,
    add_arguments,
    choice,
    duration,
    field_default,
    integer,
    number,
    read,
)
from edl_common.quantity import parse_quantity
from edl_common.version import edl_version
from edl_sim.hpa.controller import ControllerSettings
from edl_sim.hpa.errors import HpaError
from edl_sim.hpa.manifest import load_hpa, manifest_with_behavior
from edl_sim.hpa.report import comparison, summary_lines, timeline
from edl_sim.hpa.simulate import LoadModel, Simulation, SimulationSettings
from edl_sim.hpa.spec import (
    HorizontalPodAutoscaler,
    PodsMetricSource,
    ResourceMetricSource,
)
from edl_sim.hpa.trace import MetricTrace, PrometheusQuery, load_prometheus, load_trace
from edl_sim.hpa.tune import GRID, MAX_ROUNDS, TOLERANCE_GRID, Objective, Tuner


def _timestamp(text: str) -> float:
    """Unix seconds from a number or an RFC 3339 time (for Prometheus ranges)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise ConfigError("not a Unix time or RFC 3339 time") from e


def _requests(text: str) -> dict[str, Decimal]:
    """``cpu=500m,memory=1Gi`` -> {"cpu": 0.5, "memory": 1073741824}."""
    requests: dict[str, Decimal] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, quantity = part.partition("=")
        if not sep or not name:
            raise ConfigError(f"{part!r} is not RESOURCE=QUANTITY (e.g. cpu=500m)")
        requests[name] = parse_quantity(quantity)
    return requests


TIMESTAMP = Kind("time (Unix seconds or RFC 3339)", _timestamp, "yesterday")
REQUESTS = Kind("RESOURCE=QUANTITY", _requests, "cpu=lots", repeatable=True)
"""Repeatable (``--request cpu=500m --request memory=1Gi``) or a comma list."""

TRACE = "metric trace (a file, or a Prometheus range query)"
CONTROLLER = "kube-controller-manager flags"
CLUSTER = "simulated cluster"
OBJECTIVE = "objective and search"


def _opt(name: str, kind: Kind, default: str | None, help: str, group: str = "") -> Option:
    return Option(name, "--" + name.replace("_", "-"), None, kind, default, help, group)


def _seconds(cls: type, name: str) -> str:
    """The default of `cls.name` (seconds) as the table writes a duration."""
    return format_duration(field_default(cls, name))


def _number(cls: type, name: str) -> str:
    return f"{field_default(cls, name):g}"


COMMON: tuple[Option, ...] = (
    _opt("trace", PATH, None, "CSV or JSON trace: time_seconds,metric,pod|object,value", TRACE),
    _opt("prometheus_url", TEXT, None, "Prometheus base URL, e.g. http://127.0.0.1:9090", TRACE),
    _opt("query", TEXT, None, "PromQL for the range query", TRACE),
    _opt("start", TIMESTAMP, None, "range start", TRACE),
    _opt("end", TIMESTAMP, None, "range end", TRACE),
    _opt("step", duration(), "15s", "range step", TRACE),
    _opt("metric", TEXT, None, "metric name for the queried series (default __name__)", TRACE),
    _opt(
        "pod_label",
        TEXT,
        field_default(PrometheusQuery, "pod_label"),
        "label naming the pod",
        TRACE,
    ),
    _opt(
        "sync_period",
        duration(),
        _seconds(ControllerSettings, "sync_period"),
        "--horizontal-pod-autoscaler-sync-period",
        CONTROLLER,
    ),
    _opt(
        "tolerance",
        number(0),
        _number(ControllerSettings, "tolerance"),
        "--horizontal-pod-autoscaler-tolerance",
        CONTROLLER,
    ),
    _opt(
        "downscale_stabilization",
        duration(allow_zero=True),
        _seconds(ControllerSettings, "downscale_stabilization"),
        "--horizontal-pod-autoscaler-downscale-stabilization",
        CONTROLLER,
    ),
    _opt(
        "cpu_initialization_period",
        duration(allow_zero=True),
        _seconds(ControllerSettings, "cpu_initialization_period"),
        "--horizontal-pod-autoscaler-cpu-initialization-period",
        CONTROLLER,
    ),
    _opt(
        "initial_readiness_delay",
        duration(allow_zero=True),
        _seconds(ControllerSettings, "initial_readiness_delay"),
        "--horizontal-pod-autoscaler-initial-readiness-delay",
        CONTROLLER,
    ),
    _opt(
        "configurable_tolerance",
        TOGGLE,
        "true" if field_default(ControllerSettings, "configurable_tolerance") else "false",
        "feature gate HPAConfigurableTolerance (beta, on by default in v1.35; "
        "--no-configurable-tolerance models v1.33-1.34, where it is off)",
        CONTROLLER,
    ),
    _opt(
        "initial_replicas",
        integer(0),
        None,
        "replicas at the start (default: pods in the trace, else minReplicas)",
        CLUSTER,
    ),
    _opt(
        "load_model",
        choice(*(m.value for m in LoadModel)),
        field_default(SimulationSettings, "load_model").value,
        "split: per-pod values are total load / running pods; replay: as recorded",
        CLUSTER,
    ),
    _opt(
        "pod_startup",
        duration(allow_zero=True),
        _seconds(SimulationSettings, "pod_startup"),
        "time a new pod is Pending",
        CLUSTER,
    ),
    _opt(
        "rescale_cost",
        duration(allow_zero=True),
        _seconds(SimulationSettings, "rescale_cost"),
        "training time lost per change",
        CLUSTER,
    ),
    _opt("duration", duration(), None, "time to simulate (default: the trace)", CLUSTER),
    _opt(
        "request",
        REQUESTS,
        None,
        "per-pod request for Utilization targets, repeatable (default 1 per resource)",
        CLUSTER,
    ),
)
"""The options of both `edl-hpa simulate` and `edl-hpa tune`."""

SIMULATE: tuple[Option, ...] = (
    *COMMON,
    _opt("plot", PATH, "hpa-simulate.png", "PNG to write"),
    _opt("no_plot", SWITCH, None, "do not write a PNG"),
    _opt("reach_within", duration(), None, "also count targets reached later"),
)
TUNE: tuple[Option, ...] = (
    *COMMON,
    _opt("reach_within", duration(), None, "objective: reach targets within this", OBJECTIVE),
    _opt(
        "under_weight",
        number(0),
        _number(Objective, "under_weight"),
        "cost of an under-provisioned replica-second",
        OBJECTIVE,
    ),
    _opt(
        "over_weight",
        number(0),
        _number(Objective, "over_weight"),
        "cost of an over-provisioned replica-second",
        OBJECTIVE,
    ),
    _opt(
        "pause_weight",
        number(0),
        _number(Objective, "pause_weight"),
        "cost of a paused replica-second",
        OBJECTIVE,
    ),
    _opt("max_rounds", integer(1), str(MAX_ROUNDS), "coordinate-descent rounds", OBJECTIVE),
    _opt(
        "search_tolerance",
        SWITCH,
        None,
        "also search per-HPA behavior.*.tolerance (needs HPAConfigurableTolerance)",
        OBJECTIVE,
    ),
    _opt("output", PATH, None, "also write the recommended manifest here", OBJECTIVE),
    _opt("plot", PATH, None, "PNG of the recommended HPA's run", OBJECTIVE),
)
TABLES = {"simulate": SIMULATE, "tune": TUNE}
"""Each command's option table (`edl_common.options`): its parser and docs/hpa rows."""


def build_parser() -> argparse.ArgumentParser:
    """The `edl-hpa` command line."""
    parser = Parser(prog="edl-hpa", description=__doc__)
    parser.add_argument("--version", action="version", version=f"edl-hpa {edl_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    helps = {
        "simulate": "replay a trace through the HPA model",
        "tune": "search behavior parameters against an objective",
    }
    for name, table in TABLES.items():
        command = commands.add_parser(name, help=helps[name])
        command.add_argument("hpa", type=Path, help="HPA manifest (autoscaling/v2 YAML)")
        add_arguments(command, table)
        add_log_format_argument(command)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line with every option converted by its table; raises `ConfigError`."""
    args = build_parser().parse_args(argv)
    values = read(TABLES[args.command], vars(args), {})
    values["request"] = values["request"] or {}
    return argparse.Namespace(**{**vars(args), **values})


def _trace(args: argparse.Namespace) -> MetricTrace:
    if args.trace is not None and args.prometheus_url is not None:
        raise ConfigError("give either --trace or --prometheus-url, not both")
    if args.trace is not None:
        return load_trace(args.trace)
    if args.prometheus_url is None:
        raise ConfigError("a trace is required: --trace FILE or --prometheus-url URL --query Q")
    missing = [f"--{n}" for n in ("query", "start", "end") if getattr(args, n) is None]
    if missing:
        raise ConfigError(f"--prometheus-url also needs {', '.join(missing)}")
    return load_prometheus(
        PrometheusQuery(
            args.prometheus_url,
            args.query,
            args.start,
            args.end,
            args.step,
            args.metric,
            args.pod_label,
        )
    )


def _controller_settings(args: argparse.Namespace) -> ControllerSettings:
    if args.sync_period <= 0:
        raise ConfigError("--sync-period must be positive")
    return ControllerSettings(
        sync_period=args.sync_period,
        tolerance=args.tolerance,
        downscale_stabilization=args.downscale_stabilization,
        cpu_initialization_period=args.cpu_initialization_period,
        initial_readiness_delay=args.initial_readiness_delay,
        configurable_tolerance=args.configurable_tolerance,
    )


def _initial_replicas(
    args: argparse.Namespace, hpa: HorizontalPodAutoscaler, trace: MetricTrace
) -> int:
    if args.initial_replicas is not None:
        if args.initial_replicas < 0:
            raise ConfigError("--initial-replicas must be >= 0")
        return int(args.initial_replicas)
    for metric in hpa.spec.metrics:
        if isinstance(metric.source, PodsMetricSource | ResourceMetricSource):
            pods = trace.pod_values(metric.metric_name, trace.start)
            if pods:
                return len(pods)
    return hpa.spec.min_replicas or 1


def _simulation_settings(
    args: argparse.Namespace, hpa: HorizontalPodAutoscaler, trace: MetricTrace
) -> SimulationSettings:
    return SimulationSettings(
        initial_replicas=_initial_replicas(args, hpa, trace),
        load_model=LoadModel(args.load_model),
        pod_startup=args.pod_startup,
        rescale_cost=args.rescale_cost,
        duration=args.duration,
        requests=args.request,
    )


log = logging.getLogger("edl-hpa")


def _warn_tolerance(hpa: HorizontalPodAutoscaler, settings: ControllerSettings) -> None:
    behavior = hpa.spec.behavior
    if behavior is None or settings.configurable_tolerance:
        return
    rules = [r for r in (behavior.scale_up, behavior.scale_down) if r is not None]
    if any(r.tolerance is not None for r in rules):
        log.warning(
            "spec.behavior.*.tolerance is ignored with --no-configurable-tolerance "
            "(as by v1.33-1.34, where HPAConfigurableTolerance is off)"
        )


def _check_writable(path: Path | None) -> None:
    """Fail before simulating rather than after printing a timeline."""
    if path is not None and not path.parent.is_dir():
        raise ConfigError(f"cannot write {path}: {path.parent} is not a directory")


def simulate(args: argparse.Namespace, out: TextIO) -> int:
    """`edl-hpa simulate`."""
    _check_writable(None if args.no_plot else args.plot)
    hpa = load_hpa(args.hpa)
    trace = _trace(args)
    controller = _controller_settings(args)
    _warn_tolerance(hpa, controller)
    settings = _simulation_settings(args, hpa, trace)
    result = Simulation(hpa.spec, trace, settings, controller).run()
    path = "behavior" if hpa.spec.behavior else "legacy (no behavior)"
    print(
        f"HPA {hpa.namespace}/{hpa.name}: {path}, sync period {controller.sync_period:g}s, "
        f"load model {settings.load_model.value}",
        file=out,
    )
    print(timeline(result), file=out)
    print("\nsummary", file=out)
    for line in summary_lines(result.summary, settings.rescale_cost, args.reach_within):
        print(f"  {line}", file=out)
    if not args.no_plot:
        from edl_sim.hpa.plot import write_plot

        write_plot(result, args.plot, f"{hpa.name}: simulated HPA decisions")
        print(f"\nplot written to {args.plot}", file=out)
    return 0


def tune(args: argparse.Namespace, out: TextIO) -> int:
    """`edl-hpa tune`."""
    _check_writable(args.plot)
    _check_writable(args.output)
    hpa = load_hpa(args.hpa)
    trace = _trace(args)
    controller = _controller_settings(args)
    _warn_tolerance(hpa, controller)
    settings = _simulation_settings(args, hpa, trace)
    if args.max_rounds < 1:
        raise ConfigError("--max-rounds must be >= 1")
    objective = Objective(args.reach_within, args.under_weight, args.over_weight, args.pause_weight)
    if args.search_tolerance and not controller.configurable_tolerance:
        raise ConfigError("--search-tolerance needs the HPAConfigurableTolerance gate on")
    grid = {**GRID, **TOLERANCE_GRID} if args.search_tolerance else GRID
    tuner = Tuner(
        hpa.spec, trace, settings, controller, objective, grid=grid, max_rounds=args.max_rounds
    )
    result = tuner.run(progress=lambda line: log.info("%s", line))
    manifest = manifest_with_behavior(hpa, result.best.behavior())
    print(f"objective: {objective.describe()}", file=out)
    print(f"candidates simulated: {result.evaluated}", file=out)
    print("", file=out)
    print(comparison(result, args.reach_within), file=out)
    print("\n# recommended HPA", file=out)
    print(manifest, file=out, end="")
    if args.output is not None:
        args.output.write_text(manifest, encoding="utf-8")
    if args.plot is not None:
        from edl_sim.hpa.plot import write_plot

        write_plot(result.best_result, args.plot, f"{hpa.name}: recommended behavior")
    return 0


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Entry point of the `edl-hpa` console script."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr

    def command_line() -> int:
        args = parse(argv)
        try:  # its only variable is EDL_LOG_FORMAT: any other EDL_* is somebody's typo
            tool_logger("edl-hpa", args.log_format, os.environ, (), stderr)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        handler = simulate if args.command == "simulate" else tune
        return handler(args, stdout)

    return run_command(
        "edl-hpa",
        command_line,
        [ErrorExit((HpaError,), EXIT_FAILURE), ErrorExit((OSError,), EXIT_FAILURE, _os_error)],
        stderr,
        json_logs=lambda: json_chosen(sys.argv[1:] if argv is None else argv, os.environ),
    )


def _os_error(e: BaseException) -> str:
    assert isinstance(e, OSError)
    return f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
