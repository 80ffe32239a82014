"""The figures of a run, the side-by-side table, and the ``--json`` object.

Definitions (docs/cluster-simulation.md has them for users):

* **JCT**: submission to the last sample trained; **pending**: submission to the job's first
  training step (its minimum of workers Running); both over finished (started) jobs. p50/p99
  interpolate linearly between ranks.
* **makespan**: time of the last job's completion (from t = 0).
* **allocation utilisation** (EDL 2018's definition): requests of Running pods / allocatable,
  of GPUs on a cluster with GPUs, else of CPUs, averaged over the window [0, ``window``]
  (default: the makespan). **off-peak**: the same average over the times the background
  service is at its smallest (only when it varies).
* **rescales**: world changes after a job's start; **lost to rescales**: seconds jobs stood
  still in rescale pauses.
* **protected pods pending**: seconds each background (higher-priority) pod waited to be
  bound; one still waiting at the end counts until then.
* **per-job slowdown** against a baseline (:func:`slowdown`): each job's JCT over its JCT
  under the baseline (``static``), over the jobs both finished: the worst ratio, the share of
  jobs slower than under the baseline (ratio above 1) and the ratios' quantiles. A mean can
  hide a job that a policy makes wait far longer than static sizing would.
* **jobs unfinished**: the jobs a run stopped before (only with ``--max-time``: by default a
  run goes on until every job has finished). Policies that finished different jobs are not
  compared: their ratios are refused (``-`` in the table, null in the JSON), since a mean over
  other jobs says nothing about the same ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from edl_sim.cluster.engine import ClusterSnapshot, SimResult


@dataclass(frozen=True)
class Figures:
    """One policy's figures (the ``--json`` keys)."""

    policy: str
    jobs: int
    jobs_finished: int
    jobs_unfinished: tuple[str, ...]
    """The names of the jobs left when the run stopped (``--max-time``)."""
    jct_mean_s: float | None
    jct_p50_s: float | None
    jct_p99_s: float | None
    pending_mean_s: float | None
    pending_p99_s: float | None
    makespan_s: float
    utilisation_resource: str
    utilisation_mean: float
    utilisation_off_peak: float | None
    window_s: float
    rescales: int
    rescales_per_job: float
    rescale_lost_s: float
    protected_pods: int
    protected_pending_mean_s: float | None
    protected_pending_max_s: float | None
    workers_preempted: int
    decisions: int
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (floats rounded to what the figures mean)."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, float):
                value = round(value, 4 if key.startswith("utilisation") else 2)
            out[key] = value
        return out


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile with linear interpolation between ranks (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _segments(
    series: Sequence[ClusterSnapshot], end: float
) -> Iterable[tuple[float, float, ClusterSnapshot]]:
    for i, sample in enumerate(series):
        stop = series[i + 1].time if i + 1 < len(series) else end
        if stop > sample.time:
            yield sample.time, stop, sample


def utilisation(result: SimResult, window: float, resource: str) -> tuple[float, float | None]:
    """Mean utilisation over [0, window], and over its off-peak times (None: no off-peak)."""
    index = {"cpu": 0, "memory": 1, "gpu": 2}[resource]
    total = result.allocatable[index]
    end = max(window, result.end)
    spans = [
        (a, min(b, window), getattr(s, resource) / total if total > 0 else 0.0, s.service_pods)
        for a, b, s in _segments(result.series, end)
        if a < window
    ]
    covered = sum(b - a for a, b, _, _ in spans)
    mean = sum((b - a) * u for a, b, u, _ in spans) / covered if covered > 0 else 0.0
    counts = {c for _, _, _, c in spans}
    if len(counts) < 2:
        return mean, None
    low = min(counts)
    off = [(a, b, u) for a, b, u, c in spans if c == low]
    length = sum(b - a for a, b, _ in off)
    return mean, sum((b - a) * u for a, b, u in off) / length if length > 0 else None


@dataclass(frozen=True)
class Slowdown:
    """Per-job JCT of one policy against a baseline's, over the jobs both finished."""

    policy: str
    baseline: str
    jobs: int
    """Jobs compared."""
    worst: float
    """The largest JCT ratio (1.3: that job took 30 % longer than under the baseline)."""
    worst_job: str
    slower: int
    """Jobs whose JCT ratio is above 1."""
    p50: float
    p90: float
    p99: float

    @property
    def slower_share(self) -> float:
        """The share of the compared jobs that were slower than under the baseline."""
        return self.slower / self.jobs if self.jobs else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (ratios rounded to 4 places)."""
        out: dict[str, Any] = {"slower_share": round(self.slower_share, 4)}
        for key, value in asdict(self).items():
            out[key] = round(value, 4) if isinstance(value, float) else value
        return out


def slowdown(result: SimResult, base: SimResult) -> Slowdown | None:
    """Each job's JCT under ``result`` over its JCT under ``base`` (None: no job in common)."""
    before = {j.name: j.jct for j in base.jobs if j.jct is not None and j.jct > 0}
    ratios = sorted(
        (j.jct / before[j.name], j.name)
        for j in result.jobs
        if j.jct is not None and j.name in before
    )
    if not ratios:
        return None
    values = [r for r, _ in ratios]
    return Slowdown(
        result.policy, base.policy, len(ratios), ratios[-1][0], ratios[-1][1],
        sum(1 for r in values if r > 1.0),
        quantile(values, 0.5) or 0.0, quantile(values, 0.9) or 0.0, quantile(values, 0.99) or 0.0,
    )  # fmt: skip


def figures(result: SimResult, window: float | None = None) -> Figures:
    """The figures of one run (``window``: the utilisation window; default the makespan)."""
    finished = [j for j in result.jobs if j.finished is not None]
    jct = [j.jct for j in finished if j.jct is not None]
    pending = [j.pending for j in result.jobs if j.pending is not None]
    makespan = max((j.finished for j in finished if j.finished is not None), default=result.end)
    if len(finished) < len(result.jobs):
        makespan = result.end
    resource = "gpu" if result.allocatable[2] > 0 else "cpu"
    span = window if window is not None else makespan
    mean, off_peak = utilisation(result, span, resource)
    rescales = sum(j.rescales for j in result.jobs)
    waits = list(result.service_waits)
    return Figures(
        policy=result.policy,
        jobs=len(result.jobs),
        jobs_finished=len(finished),
        jobs_unfinished=tuple(j.name for j in result.jobs if j.finished is None),
        jct_mean_s=_mean(jct),
        jct_p50_s=quantile(jct, 0.5),
        jct_p99_s=quantile(jct, 0.99),
        pending_mean_s=_mean(pending),
        pending_p99_s=quantile(pending, 0.99),
        makespan_s=makespan,
        utilisation_resource=resource,
        utilisation_mean=mean,
        utilisation_off_peak=off_peak,
        window_s=span,
        rescales=rescales,
        rescales_per_job=rescales / len(result.jobs) if result.jobs else 0.0,
        rescale_lost_s=sum(j.lost_s for j in result.jobs),
        protected_pods=len(waits),
        protected_pending_mean_s=_mean(waits),
        protected_pending_max_s=max(waits) if waits else None,
        workers_preempted=result.preempted,
        decisions=result.decisions,
        wall_s=result.wall_s,
    )


_ROWS: tuple[tuple[str, str, str], ...] = (
    ("jobs_finished", "jobs finished", "{:.0f}"),
    ("jct_mean_s", "JCT mean (s)", "{:.0f}"),
    ("jct_p50_s", "JCT p50 (s)", "{:.0f}"),
    ("jct_p99_s", "JCT p99 (s)", "{:.0f}"),
    ("pending_mean_s", "pending mean (s)", "{:.1f}"),
    ("pending_p99_s", "pending p99 (s)", "{:.1f}"),
    ("makespan_s", "makespan (s)", "{:.0f}"),
    ("utilisation_mean", "utilisation", "{:.1%}"),
    ("utilisation_off_peak", "utilisation off-peak", "{:.1%}"),
    ("rescales_per_job", "rescales per job", "{:.1f}"),
    ("rescale_lost_s", "lost to rescales (s)", "{:.0f}"),
    ("protected_pending_mean_s", "protected pods pending mean (s)", "{:.1f}"),
    ("protected_pending_max_s", "protected pods pending max (s)", "{:.1f}"),
    ("workers_preempted", "workers preempted", "{:.0f}"),
)


def ratio(value: float | None, base: float | None) -> float | None:
    """The ratio value / base (None when either is missing or base is 0)."""
    if value is None or base is None or base == 0:
        return None
    return value / base


def not_comparable(f: Figures, base: Figures) -> str | None:
    """Why ``f`` and ``base`` cannot be compared (None: they finished the same jobs)."""
    if f.jobs == base.jobs and set(f.jobs_unfinished) == set(base.jobs_unfinished):
        return None
    return (
        f"{f.policy} finished {f.jobs_finished}/{f.jobs} jobs, {base.policy} "
        f"{base.jobs_finished}/{base.jobs}: not the same jobs"
    )


def figure_ratio(f: Figures, base: Figures, key: str) -> float | None:
    """``f``'s figure ``key`` over ``base``'s; None when missing or over different jobs."""
    if not_comparable(f, base) is not None:
        return None
    return ratio(getattr(f, key), getattr(base, key))


def table(all_figures: Sequence[Figures], baseline: str = "static") -> str:
    """Every figure for each policy, with its ratio to ``baseline`` (``x0.85``), one table."""
    base = next((f for f in all_figures if f.policy == baseline), None)
    resource = all_figures[0].utilisation_resource if all_figures else "cpu"
    windows = {f.window_s for f in all_figures}
    span = f"0-{windows.pop():.0f} s" if len(windows) == 1 else "0-makespan"
    header = ["figure", *(f.policy for f in all_figures)]
    rows = [header]
    for key, label, fmt in _ROWS:
        values = [getattr(f, key) for f in all_figures]
        if key == "utilisation_off_peak" and all(v is None for v in values):
            continue
        if key.startswith("protected") and all(f.protected_pods == 0 for f in all_figures):
            continue
        if key == "workers_preempted" and not any(values):
            continue
        if key.startswith("utilisation"):
            label = f"{label} ({resource}, {span})"
        cells = [label]
        for f, value in zip(all_figures, values, strict=True):
            if value is None:
                cells.append("-")
                continue
            text = fmt.format(value)
            if key == "jobs_finished":
                text = f"{value}/{f.jobs}"
            elif base is not None and f is not base:
                r = figure_ratio(f, base, key)
                text += f" (x{r:.2f})" if r is not None else ""
            cells.append(text)
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        first = row[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join([first, *rest]))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if base is not None and len(all_figures) > 1:
        lines.append(f"(xN: the figure divided by {baseline}'s)")
    for f in all_figures:
        if f.jobs_unfinished:
            shown = ", ".join(f.jobs_unfinished[:10])
            more = f" and {len(f.jobs_unfinished) - 10} more" if len(f.jobs_unfinished) > 10 else ""
            lines.append(f"{f.policy}: unfinished when the run stopped: {shown}{more}")
        why = not_comparable(f, base) if base is not None and f is not base else None
        if why is not None:
            lines.append(f"{f.policy}: no ratio to {baseline} ({why})")
    return "\n".join(lines)


def to_json(all_figures: Sequence[Figures], baseline: str = "static") -> dict[str, Any]:
    """One policy: its figures; several: ``{"policies": {...}, "ratios_to_<baseline>": ...}``."""
    if len(all_figures) == 1:
        return all_figures[0].to_dict()
    base = next((f for f in all_figures if f.policy == baseline), None)
    ratios: dict[str, Mapping[str, float | None]] = {}
    refused: dict[str, str] = {}
    if base is not None:
        for f in all_figures:
            ratios[f.policy] = {
                key: None if (r := figure_ratio(f, base, key)) is None else round(r, 4)
                for key, _, _ in _ROWS
            }
            why = not_comparable(f, base)
            if why is not None:
                refused[f.policy] = why
    out: dict[str, Any] = {
        "policies": {f.policy: f.to_dict() for f in all_figures},
        f"ratios_to_{baseline}": ratios,
    }
    if refused:
        out[f"ratios_refused_{baseline}"] = refused
    return out
