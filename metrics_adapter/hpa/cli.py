"""`edl-hpa`: simulate an HPA over a recorded metric trace, or tune its `behavior`.

Every user error ends as one line on stderr and a non-zero exit status (2 for bad usage,
1 for bad input files or an unreachable Prometheus).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import NoReturn, TextIO

import metrics_adapter
from metrics_adapter.hpa.controller import ControllerSettings
from metrics_adapter.hpa.errors import HpaError, QuantityError
from metrics_adapter.hpa.manifest import load_hpa, manifest_with_behavior
from metrics_adapter.hpa.report import comparison, summary_lines, timeline
from metrics_adapter.hpa.simulate import LoadModel, Simulation, SimulationSettings
from metrics_adapter.hpa.spec import (
    HorizontalPodAutoscaler,
    PodsMetricSource,
    ResourceMetricSource,
)
from metrics_adapter.hpa.trace import MetricTrace, PrometheusQuery, load_prometheus, load_trace
from metrics_adapter.hpa.tune import GRID, TOLERANCE_GRID, Objective, Tuner
from metrics_adapter.quantity import parse_quantity

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class UsageError(Exception):
    """Bad command line; reported as one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def duration(text: str) -> float:
    """Seconds from `90`, `90s`, `1.5m`, `500ms` or `1h`."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 15s, 5m, 120)")
    return float(match.group(1)) * _UNIT[match.group(2)]


def timestamp(text: str) -> float:
    """Unix seconds from a number or an RFC 3339 time (for Prometheus ranges)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Unix time or RFC 3339 time") from e


def resource_request(text: str) -> tuple[str, Decimal]:
    """`cpu=500m` -> ("cpu", 0.5)."""
    name, sep, quantity = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not RESOURCE=QUANTITY (e.g. cpu=500m)")
    try:
        return name, parse_quantity(quantity)
    except QuantityError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("hpa", type=Path, help="HPA manifest (autoscaling/v2 YAML)")
    source = parser.add_argument_group("metric trace (a file, or a Prometheus range query)")
    source.add_argument(
        "--trace", type=Path, help="CSV or JSON trace: time_seconds,metric,pod|object,value"
    )
    source.add_argument("--prometheus-url", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    source.add_argument("--query", help="PromQL for the range query")
    source.add_argument("--start", type=timestamp, help="range start (Unix seconds or RFC 3339)")
    source.add_argument("--end", type=timestamp, help="range end (Unix seconds or RFC 3339)")
    source.add_argument("--step", type=duration, default=15.0, help="range step (default 15s)")
    source.add_argument("--metric", help="metric name for the queried series (default __name__)")
    source.add_argument("--pod-label", default="pod", help="label naming the pod (default pod)")
    ctl = parser.add_argument_group("kube-controller-manager flags")
    ctl.add_argument("--sync-period", type=duration, default=15.0, help="default 15s")
    ctl.add_argument("--tolerance", type=float, default=0.1, help="default 0.1")
    ctl.add_argument("--downscale-stabilization", type=duration, default=300.0, help="default 5m")
    ctl.add_argument("--cpu-initialization-period", type=duration, default=300.0, help="default 5m")
    ctl.add_argument("--initial-readiness-delay", type=duration, default=30.0, help="default 30s")
    ctl.add_argument(
        "--configurable-tolerance",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="feature gate HPAConfigurableTolerance (beta, on by default in v1.35; "
        "--no-configurable-tolerance models v1.33-1.34, where it is off)",
    )
    sim = parser.add_argument_group("simulated cluster")
    sim.add_argument(
        "--initial-replicas", type=int, help="default: pods in the trace, else minReplicas"
    )
    sim.add_argument(
        "--load-model",
        choices=[m.value for m in LoadModel],
        default=LoadModel.SPLIT.value,
        help="split: per-pod values are total load / running pods (default); replay: as recorded",
    )
    sim.add_argument(
        "--pod-startup", type=duration, default=0.0, help="seconds a new pod is Pending"
    )
    sim.add_argument(
        "--rescale-cost", type=duration, default=0.0, help="training time lost per change"
    )
    sim.add_argument("--duration", type=duration, help="seconds to simulate (default: the trace)")
    sim.add_argument(
        "--request",
        type=resource_request,
        action="append",
        default=[],
        metavar="RESOURCE=QTY",
        help="per-pod request for Utilization targets (default 1 per resource)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `edl-hpa` command line."""
    parser = _Parser(prog="edl-hpa", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"edl-hpa {metrics_adapter.__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    simulate = commands.add_parser("simulate", help="replay a trace through the HPA model")
    _common(simulate)
    simulate.add_argument(
        "--plot", type=Path, default=Path("hpa-simulate.png"), help="PNG to write"
    )
    simulate.add_argument("--no-plot", action="store_true", help="do not write a PNG")
    simulate.add_argument("--reach-within", type=duration, help="also count targets reached later")
    tune = commands.add_parser("tune", help="search behavior parameters against an objective")
    _common(tune)
    tune.add_argument("--reach-within", type=duration, help="objective: reach targets within this")
    tune.add_argument(
        "--under-weight",
        type=float,
        default=1.0,
        help="cost of an under-provisioned replica-second",
    )
    tune.add_argument(
        "--over-weight", type=float, default=0.0, help="cost of an over-provisioned replica-second"
    )
    tune.add_argument(
        "--pause-weight", type=float, default=1.0, help="cost of a paused replica-second"
    )
    tune.add_argument(
        "--max-rounds", type=int, default=3, help="coordinate-descent rounds (default 3)"
    )
    tune.add_argument(
        "--search-tolerance",
        action="store_true",
        help="also search per-HPA behavior.*.tolerance (needs HPAConfigurableTolerance)",
    )
    tune.add_argument("--output", type=Path, help="also write the recommended manifest here")
    tune.add_argument("--plot", type=Path, help="PNG of the recommended HPA's run")
    return parser


def _trace(args: argparse.Namespace) -> MetricTrace:
    if args.trace is not None and args.prometheus_url is not None:
        raise UsageError("give either --trace or --prometheus-url, not both")
    if args.trace is not None:
        return load_trace(args.trace)
    if args.prometheus_url is None:
        raise UsageError("a trace is required: --trace FILE or --prometheus-url URL --query Q")
    missing = [f"--{n}" for n in ("query", "start", "end") if getattr(args, n) is None]
    if missing:
        raise UsageError(f"--prometheus-url also needs {', '.join(missing)}")
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
        raise UsageError("--sync-period must be positive")
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
            raise UsageError("--initial-replicas must be >= 0")
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
        requests=dict(args.request),
    )


def _warn_tolerance(
    hpa: HorizontalPodAutoscaler, settings: ControllerSettings, err: TextIO
) -> None:
    behavior = hpa.spec.behavior
    if behavior is None or settings.configurable_tolerance:
        return
    rules = [r for r in (behavior.scale_up, behavior.scale_down) if r is not None]
    if any(r.tolerance is not None for r in rules):
        print(
            "edl-hpa: warning: spec.behavior.*.tolerance is ignored with "
            "--no-configurable-tolerance (as by v1.33-1.34, where HPAConfigurableTolerance is off)",
            file=err,
        )


def _check_writable(path: Path | None) -> None:
    """Fail before simulating rather than after printing a timeline."""
    if path is not None and not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: {path.parent} is not a directory")


def simulate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`edl-hpa simulate`."""
    _check_writable(None if args.no_plot else args.plot)
    hpa = load_hpa(args.hpa)
    trace = _trace(args)
    controller = _controller_settings(args)
    _warn_tolerance(hpa, controller, err)
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
        from metrics_adapter.hpa.plot import write_plot

        write_plot(result, args.plot, f"{hpa.name}: simulated HPA decisions")
        print(f"\nplot written to {args.plot}", file=out)
    return 0


def tune(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`edl-hpa tune`."""
    _check_writable(args.plot)
    _check_writable(args.output)
    hpa = load_hpa(args.hpa)
    trace = _trace(args)
    controller = _controller_settings(args)
    _warn_tolerance(hpa, controller, err)
    settings = _simulation_settings(args, hpa, trace)
    if args.max_rounds < 1:
        raise UsageError("--max-rounds must be >= 1")
    objective = Objective(args.reach_within, args.under_weight, args.over_weight, args.pause_weight)
    if args.search_tolerance and not controller.configurable_tolerance:
        raise UsageError("--search-tolerance needs the HPAConfigurableTolerance gate on")
    grid = {**GRID, **TOLERANCE_GRID} if args.search_tolerance else GRID
    tuner = Tuner(
        hpa.spec, trace, settings, controller, objective, grid=grid, max_rounds=args.max_rounds
    )
    result = tuner.run(progress=lambda line: print(f"edl-hpa: {line}", file=err))
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
        from metrics_adapter.hpa.plot import write_plot

        write_plot(result.best_result, args.plot, f"{hpa.name}: recommended behavior")
    return 0


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Entry point of the `edl-hpa` console script."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr
    args = build_parser().parse_args(argv)
    handler = simulate if args.command == "simulate" else tune
    try:
        return handler(args, stdout, stderr)
    except UsageError as e:
        print(f"edl-hpa: error: {e}", file=stderr)
        return 2
    except HpaError as e:
        print(f"edl-hpa: error: {e}", file=stderr)
        return 1
    except OSError as e:
        print(f"edl-hpa: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
