"""PNG of a comparison: utilisation and Running workers over time, one line per policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edl_common.version import install_command
from edl_sim.cluster.engine import SimResult
from edl_sim.cluster.inputs import SimulationError

_COLOURS = {
    "static": "#7f7f7f",
    "hpa-throughput": "#1f77b4",
    "edl-2018": "#ff7f0e",
    "edl": "#2ca02c",
}


class PlotError(SimulationError):
    """The plot cannot be drawn (matplotlib missing) or written."""


def write_plot(
    results: Sequence[SimResult], path: Path, title: str, window: float | None = None
) -> None:
    """Utilisation (top), Running workers (middle), Running service pods (bottom, if any)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotError(f"matplotlib is not installed ({install_command('sim')})") from e
    services = any(s.service_pods for r in results for s in r.series)
    panels = 3 if services else 2
    fig, axes = plt.subplots(panels, 1, figsize=(10, 2.4 * panels + 0.8), sharex=True)
    gpu = bool(results and results[0].allocatable[2] > 0)
    resource = "GPU" if gpu else "CPU"
    end = max(r.end for r in results)
    if window:
        end = max(end, window)
    scale, unit = (3600.0, "h") if end > 4 * 3600 else (1.0, "s")
    for result in results:
        total = result.allocatable[2] if gpu else result.allocatable[0]
        times = [s.time / scale for s in result.series] + [result.end / scale]
        used = [(s.gpu if gpu else s.cpu) / total * 100 for s in result.series]
        workers = [float(s.workers) for s in result.series]
        colour = _COLOURS.get(result.policy)
        axes[0].step(times, [*used, used[-1]], where="post", label=result.policy, color=colour)
        axes[1].step(times, [*workers, workers[-1]], where="post", color=colour)
        if services:
            pods = [float(s.service_running) for s in result.series]
            axes[2].step(times, [*pods, pods[-1]], where="post", color=colour)
    axes[0].set_ylabel(f"{resource} requested by\nRunning pods (%)")
    axes[0].set_ylim(0, 105)
    axes[0].legend(loc="lower right", ncol=len(results), fontsize="small")
    axes[1].set_ylabel("Running workers")
    if services:
        axes[2].set_ylabel("Running service\npods")
        wanted = results[0].series
        axes[2].step(
            [s.time / scale for s in wanted] + [end / scale],
            [float(s.service_pods) for s in wanted] + [float(wanted[-1].service_pods)],
            where="post", color="black", linestyle="--", linewidth=0.8, label="wanted",
        )  # fmt: skip
        axes[2].legend(loc="lower right", fontsize="small")
    if window:
        for ax in axes:
            ax.axvline(window / scale, color="black", linestyle=":", linewidth=0.8)
    axes[-1].set_xlabel(f"time ({unit})")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=90)
    except OSError as e:
        raise PlotError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        plt.close(fig)
