"""PNG plot of a simulated run: each metric against its target, and replicas over time."""

from __future__ import annotations

from pathlib import Path

from edl_common.version import install_command
from edl_sim.hpa.errors import HpaError
from edl_sim.hpa.simulate import SimulationResult


class PlotError(HpaError):
    """The plot cannot be drawn or written (matplotlib missing, unwritable path)."""


def write_plot(result: SimulationResult, path: Path, title: str) -> None:
    """Draw the metric panel(s) and the replica panel into `path` (matplotlib, Agg backend)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotError(
            f"matplotlib is not installed ({install_command('sim')}), or pass --no-plot"
        ) from e

    times = [s.decision.time for s in result.steps]
    panels = len(result.metric_names) + 1
    fig, axes = plt.subplots(panels, 1, figsize=(10, 2.6 * panels + 0.6), sharex=True)
    for index, (name, target) in enumerate(
        zip(result.metric_names, result.metric_targets, strict=True)
    ):
        ax = axes[index]
        values = [
            s.metric_values[index] if index < len(s.metric_values) else None for s in result.steps
        ]
        ax.step(
            times,
            [v if v is not None else float("nan") for v in values],
            where="post",
            label=f"{name} (as the HPA sees it)",
            color="tab:blue",
        )
        if target is not None:
            ax.axhline(
                target, color="tab:red", linestyle="--", linewidth=1, label=f"target {target:g}"
            )
        ax.set_ylabel(name)
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[-1]
    replicas = [s.decision.desired_replicas for s in result.steps]
    targets = [s.target_replicas for s in result.steps]
    ax.step(
        times,
        targets,
        where="post",
        color="tab:gray",
        linestyle="--",
        label="replicas the load asks for",
    )
    ax.step(times, replicas, where="post", color="tab:green", linewidth=2, label="replicas (HPA)")
    events = [
        (s.decision.time, s.decision.desired_replicas) for s in result.steps if s.decision.rescaled
    ]
    if events:
        ax.plot(
            [t for t, _ in events],
            [r for _, r in events],
            "o",
            color="tab:green",
            markersize=4,
            label="scale event",
        )
    ax.set_ylabel("replicas")
    ax.set_xlabel("seconds since the HPA was created")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise PlotError(f"cannot write the plot to {path}: {e.strerror or e}") from e
    finally:
        plt.close(fig)
