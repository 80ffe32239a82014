"""Plain-text timeline, summary and tune comparison, as `edl-hpa` prints them."""

from __future__ import annotations

from edl_sim.hpa.controller import ABLE_TO_SCALE, SCALING_LIMITED, Decision
from edl_sim.hpa.simulate import SimulationResult, Summary
from edl_sim.hpa.tune import TuneResult

_STABILIZED = ("ScaleUpStabilized", "ScaleDownStabilized")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}s"


def decision_reason(decision: Decision) -> str:
    """Why the count is what it is: stabilisation, a limiting condition, the rescale, an error.

    Empty when the metrics asked for the current count (inside the tolerance).
    """
    if decision.metric_replicas is None and not decision.rescaled:
        return f"frozen: {decision.error}" if decision.error else ""
    parts: list[str] = []
    if decision.metric_replicas is not None:
        if decision.stabilized_replicas != decision.metric_replicas:
            able = decision.condition(ABLE_TO_SCALE)
            label = able.reason if able is not None and able.reason in _STABILIZED else "stabilized"
            if decision.rescaled and able is not None and able.reason == "SucceededRescale":
                label = (
                    "ScaleDownStabilized"
                    if decision.metric_replicas < decision.current_replicas
                    else "ScaleUpStabilized"
                )
            parts.append(f"{label} (metrics ask {decision.metric_replicas})")
        limited = decision.condition(SCALING_LIMITED)
        if limited is not None and limited.status:
            parts.append(limited.reason)
    if decision.rescaled:
        parts.append(f"rescaled: {decision.reason}")
    elif decision.error:
        parts.append(f"error: {decision.error}")
    return "; ".join(parts)


def timeline(result: SimulationResult) -> str:
    """One line per sync: time, current, desired, target count, metric values, reason."""
    metric_heads = [
        f"{name}({target:g})" if target is not None else name
        for name, target in zip(result.metric_names, result.metric_targets, strict=True)
    ]
    head = ["time", "current", "desired", "target", *metric_heads, "reason"]
    rows = [head]
    for step in result.steps:
        d = step.decision
        values = ["-" if v is None else f"{v:.3f}" for v in step.metric_values]
        rows.append(
            [
                f"{d.time:g}s",
                str(d.current_replicas),
                str(d.desired_replicas),
                str(step.target_replicas),
                *values,
                decision_reason(d),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    lines = []
    for row in rows:
        cells = [row[i].rjust(widths[i]) for i in range(len(widths))]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def summary_lines(summary: Summary, rescale_cost: float, reach_within: float | None) -> list[str]:
    """The run's figures, one per line."""
    reached = [r for r in summary.reaches if r.after is not None]
    mean = sum(r.after for r in reached if r.after is not None) / len(reached) if reached else None
    lines = [
        f"scale events: {summary.rescales} ({summary.scale_ups} up, {summary.scale_downs} down)",
        f"time to reach target: max {_seconds(summary.max_reach)}, mean "
        f"{_seconds(None if mean is None else round(mean, 1))} over the {len(reached)} of "
        f"{len(summary.reaches)} target changes that were reached "
        f"({summary.unreached} changed again before being reached)",
    ]
    lines.append(
        f"longest spell under target: {summary.longest_under:g}s; "
        f"over target: {summary.longest_over:g}s"
    )
    if reach_within is not None:
        lines.append(
            f"spells under target longer than {reach_within:g}s: {summary.late(reach_within)}"
        )
    lines += [
        f"replica-seconds under target: {summary.under_replica_seconds:g}",
        f"replica-seconds over target: {summary.over_replica_seconds:g}",
        f"training time lost to rescale pauses: {summary.paused_seconds:g}s "
        f"({summary.rescales} x {rescale_cost:g}s), "
        f"{summary.paused_replica_seconds:g} replica-seconds",
    ]
    return lines


def comparison(result: TuneResult, reach_within: float | None) -> str:
    """Current vs recommended figures side by side."""
    rows = [("figure", "current", "recommended")]

    def add(label: str, current: str, best: str) -> None:
        rows.append((label, current, best))

    cur, new = result.current.summary, result.best_result.summary
    add("scale events", str(cur.rescales), str(new.rescales))
    add("max time to reach target", _seconds(cur.max_reach), _seconds(new.max_reach))
    add("longest spell under target", _seconds(cur.longest_under), _seconds(new.longest_under))
    add("longest spell over target", _seconds(cur.longest_over), _seconds(new.longest_over))
    if reach_within is not None:
        add(
            f"spells under target > {reach_within:g}s",
            str(cur.late(reach_within)),
            str(new.late(reach_within)),
        )
    add(
        "replica-seconds under target",
        f"{cur.under_replica_seconds:g}",
        f"{new.under_replica_seconds:g}",
    )
    add(
        "replica-seconds over target",
        f"{cur.over_replica_seconds:g}",
        f"{new.over_replica_seconds:g}",
    )
    add("seconds paused by rescales", f"{cur.paused_seconds:g}", f"{new.paused_seconds:g}")
    add(
        "replica-seconds paused",
        f"{cur.paused_replica_seconds:g}",
        f"{new.paused_replica_seconds:g}",
    )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0].ljust(widths[0])}  {r[1].rjust(widths[1])}  {r[2].rjust(widths[2])}" for r in rows
    )
