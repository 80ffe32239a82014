"""The simulator's input files (CSV), read and validated into plain values.

Four files, each with a header row naming its columns (any order; blank lines and lines
starting with ``#`` are skipped). Amounts are Kubernetes quantities (``5``, ``500m``,
``8Gi``); GPUs are ``nvidia.com/gpu`` devices.

* workload: ``name,submit_seconds,min_workers,max_workers,requested_workers,cpu,memory,gpu,
  work_samples,curve,priority`` -- one training job a row; ``cpu``/``memory``/``gpu`` are the
  requests of ONE worker pod, ``work_samples`` what the job trains before it is done.
* curves: ``curve,workers,samples_per_second`` -- measured throughput of a job class at a
  world size. Between two measured sizes the throughput is the straight line between them;
  below the smallest it is proportional to the workers (from the origin), above the largest
  it stays at the largest's (more workers never add what was not measured). This is not
  the sizer's model (a USL fit), so the world does not agree with the sizer by construction.
* placements (optional): ``curve,placement,local_bsz,step_time_s`` -- step time of a job
  class by how its workers sit on nodes (``placement``: workers per node, e.g. ``22`` is two
  nodes with two workers each). With it, a job's speed depends on its placement
  (:class:`PlacementTable`); without it, on its worker count only.
* cluster: ``name,count,cpu,memory,gpu`` -- node groups (``count`` identical nodes, named
  ``<name>-<i>``) with their allocatable amounts.
* background (optional): ``time_seconds,pods,cpu,memory,gpu,priority`` -- a higher-priority
  service has ``pods`` pods of these requests from that time on (rows with the same requests
  and priority are the same service).

Every problem is one :class:`InputError` naming the file and line.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from edl_sizing import GPU, ResourceError, Resources

WORKLOAD_COLUMNS = (
    "name",
    "submit_seconds",
    "min_workers",
    "max_workers",
    "requested_workers",
    "cpu",
    "memory",
    "gpu",
    "work_samples",
    "curve",
    "priority",
)
CURVE_COLUMNS = ("curve", "workers", "samples_per_second")
CLUSTER_COLUMNS = ("name", "count", "cpu", "memory", "gpu")
BACKGROUND_COLUMNS = ("time_seconds", "pods", "cpu", "memory", "gpu", "priority")
PLACEMENT_COLUMNS = ("curve", "placement", "local_bsz", "step_time_s")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,50}[a-z0-9])?$")


class SimulationError(ValueError):
    """Base of the simulator's own errors (bad input, impossible settings)."""


class InputError(SimulationError):
    """An input file is not valid; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One training job of the workload."""

    name: str
    submit: float
    min_workers: int
    max_workers: int
    requested: int
    worker: Resources
    """Requests of one worker pod."""
    work_samples: float
    curve: str
    priority: int = 0


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` identical nodes."""

    name: str
    count: int
    allocatable: Resources


@dataclass(frozen=True, slots=True)
class BackgroundStep:
    """From ``time`` on, the service of these requests and priority has ``pods`` pods."""

    time: float
    pods: int
    requests: Resources
    priority: int

    @property
    def service(self) -> str:
        """The service's identity: its requests and priority."""
        r = self.requests
        return f"svc-p{self.priority}-{r.cpu:g}c-{r.memory / 2**20:g}mi-{r.gpu:g}g"


Placement = tuple[int, ...]
"""Workers per node of one job, largest first (``(4, 1)``: four on one node, one on another)."""


def packed(workers: int, per_node: int) -> Placement:
    """The placement of ``workers`` packed onto nodes of ``per_node`` workers each."""
    full, rest = divmod(workers, max(1, per_node))
    return (max(1, per_node),) * full + ((rest,) if rest else ())


class PlacementTable:
    """How much a job class's speed depends on where its workers are.

    From the measured step times: at the local batch size whose one-worker throughput is
    closest to the curve's one-worker point, throughput(p) = workers x batch / step time,
    averaged over the measured orders of the same placement. A job of n workers on
    placement p runs at curve(n) x throughput(p) / throughput(packed(n)): the curve is
    taken as measured packed (sizes up to a node on one node, as the dev set's README says).
    A placement (or its packed reference) that was not measured leaves curve(n) unchanged.
    """

    def __init__(self, throughput: Mapping[Placement, float], per_node: int) -> None:
        self.throughput = dict(throughput)
        self.per_node = per_node

    def factor(self, placement: Placement) -> float:
        """Speed on ``placement`` relative to the same workers packed (1.0: unknown)."""
        here = self.throughput.get(placement)
        there = self.throughput.get(packed(sum(placement), self.per_node))
        if here is None or there is None or there <= 0:
            return 1.0
        return here / there


class Curve:
    """A job class's throughput per world size: measured points, straight lines between."""

    def __init__(
        self, name: str, points: Mapping[int, float], placements: PlacementTable | None = None
    ) -> None:
        self.name = name
        self.points = dict(points)
        self.placements = placements
        self._sizes = sorted(self.points)
        self._cache: dict[int, float] = {}

    def throughput(self, workers: int, placement: Placement | None = None) -> float:
        """Samples per second at ``workers`` (0 for none), on ``placement`` when given."""
        if workers <= 0:
            return 0.0
        cached = self._cache.get(workers)
        if cached is None:
            cached = self._cache[workers] = self._interpolate(workers)
        if placement is None or self.placements is None or sum(placement) != workers:
            return cached
        return cached * self.placements.factor(placement)

    def _interpolate(self, n: int) -> float:
        measured = self.points.get(n)
        if measured is not None:
            return measured
        sizes = self._sizes
        if n < sizes[0]:
            return self.points[sizes[0]] * n / sizes[0]
        if n > sizes[-1]:
            return self.points[sizes[-1]]
        high = next(s for s in sizes if s > n)
        low = max(s for s in sizes if s < n)
        x0, x1 = self.points[low], self.points[high]
        return x0 + (x1 - x0) * (n - low) / (high - low)


@dataclass(frozen=True)
class Workload:
    """Everything one simulation runs on."""

    jobs: tuple[JobSpec, ...]
    curves: Mapping[str, Curve]
    nodes: tuple[NodeGroup, ...]
    background: tuple[BackgroundStep, ...] = ()


def _rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    lines = [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise InputError(f"{path}: empty file (expected a header: {','.join(columns)})")
    header_line, header = lines[0]
    names = [h.strip() for h in next(csv.reader([header]))]
    unknown = [n for n in names if n not in columns]
    missing = [c for c in columns if c not in names]
    if unknown or missing:
        parts = []
        if missing:
            parts.append(f"missing column(s) {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown column(s) {', '.join(unknown)}")
        raise InputError(f"{path} line {header_line}: {'; '.join(parts)}")
    if len(set(names)) != len(names):
        raise InputError(f"{path} line {header_line}: a column is named twice")
    for number, line in lines[1:]:
        values = [v.strip() for v in next(csv.reader([line]))]
        if len(values) != len(names):
            raise InputError(
                f"{path} line {number}: {len(values)} fields, the header has {len(names)}"
            )
        yield number, dict(zip(names, values, strict=True))


def _where(path: Path, line: int) -> str:
    return f"{path} line {line}"


def _int(row: Mapping[str, str], key: str, where: str, low: int | None = None) -> int:
    raw = row[key]
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{where}: {key} {raw!r} is not an integer") from None
    if low is not None and value < low:
        raise InputError(f"{where}: {key} {value} must be at least {low}")
    return value


def _float(row: Mapping[str, str], key: str, where: str, positive: bool = False) -> float:
    raw = row[key]
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{where}: {key} {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "> 0" if positive else ">= 0"
        raise InputError(f"{where}: {key} {raw!r} must be a finite number {need}")
    return value


def _resources(row: Mapping[str, str], where: str) -> Resources:
    try:
        return Resources.parse(
            {
                k: v
                for k, v in (("cpu", row["cpu"]), ("memory", row["memory"]), (GPU, row["gpu"]))
                if v
            }
        )
    except ResourceError as e:
        raise InputError(f"{where}: {e}") from e


def _name(row: Mapping[str, str], key: str, where: str) -> str:
    value = row[key]
    if not _NAME.match(value):
        raise InputError(
            f"{where}: {key} {value!r} must be a lower-case DNS label "
            "(a-z, 0-9, '-', '.'; at most 52 characters)"
        )
    return value


def _unique(row: Mapping[str, str], seen: set[str], what: str, where: str) -> str:
    name = _name(row, "name", where)
    if name in seen:
        raise InputError(f"{where}: {what} {name!r} appears twice")
    seen.add(name)
    return name


def read_curves(
    path: Path, placements: Mapping[str, PlacementTable] | None = None
) -> dict[str, Curve]:
    """The curves file: measured points per class (with their placement tables, if any)."""
    points: dict[str, dict[int, float]] = {}
    for line, row in _rows(path, CURVE_COLUMNS):
        where = _where(path, line)
        name = _name(row, "curve", where)
        workers = _int(row, "workers", where, low=1)
        rate = _float(row, "samples_per_second", where, positive=True)
        per = points.setdefault(name, {})
        if workers in per:
            raise InputError(f"{where}: curve {name!r} has {workers} workers twice")
        per[workers] = rate
    if not points:
        raise InputError(f"{path}: no curve points")
    tables = placements or {}
    return {name: Curve(name, per, tables.get(name)) for name, per in points.items()}


def read_placements(path: Path) -> dict[str, PlacementTable]:
    """The placements file: one :class:`PlacementTable` per curve.

    The table's batch size is the one whose one-worker throughput is closest (by ratio) to
    the curve's one-worker point; the curves must be read first for that, so this returns
    raw tables keyed by curve and :func:`load_workload` calibrates them.
    """
    steps: dict[str, dict[int, dict[Placement, list[float]]]] = {}
    for line, row in _rows(path, PLACEMENT_COLUMNS):
        where = _where(path, line)
        name = _name(row, "curve", where)
        text = row["placement"]
        if not text.isdigit() or "0" in text:
            raise InputError(
                f"{where}: placement {text!r} must be workers per node as digits 1-9 (e.g. 22)"
            )
        placement = tuple(sorted((int(c) for c in text), reverse=True))
        bsz = _int(row, "local_bsz", where, low=1)
        step = _float(row, "step_time_s", where, positive=True)
        per_bsz = steps.setdefault(name, {}).setdefault(bsz, {})
        per_bsz.setdefault(placement, []).append(sum(placement) * bsz / step)
    if not steps:
        raise InputError(f"{path}: no placements")
    return {name: _raw_table(by_bsz) for name, by_bsz in steps.items()}


class _RawPlacements(PlacementTable):
    """Throughput by batch size, before :meth:`calibrated` picks the curve's batch size."""

    def __init__(self, by_bsz: Mapping[int, Mapping[Placement, float]], per_node: int) -> None:
        super().__init__({}, per_node)
        self.by_bsz = by_bsz

    def calibrated(self, one_worker: float) -> PlacementTable:
        """The table at the batch size that matches the curve's one-worker throughput."""
        usable = {b: t for b, t in self.by_bsz.items() if t.get((1,), 0) > 0}
        if not usable:
            return PlacementTable({}, self.per_node)
        bsz = min(usable, key=lambda b: (abs(math.log(usable[b][(1,)] / one_worker)), b))
        return PlacementTable(usable[bsz], self.per_node)


def _raw_table(by_bsz: Mapping[int, Mapping[Placement, list[float]]]) -> _RawPlacements:
    means = {b: {p: sum(v) / len(v) for p, v in per.items()} for b, per in by_bsz.items()}
    per_node = max(max(p) for per in means.values() for p in per)
    return _RawPlacements(means, per_node)


def read_cluster(path: Path) -> tuple[NodeGroup, ...]:
    """The node groups."""
    groups = []
    seen: set[str] = set()
    for line, row in _rows(path, CLUSTER_COLUMNS):
        where = _where(path, line)
        name = _unique(row, seen, "node group", where)
        count = _int(row, "count", where, low=1)
        allocatable = _resources(row, where)
        if allocatable.is_zero:
            raise InputError(f"{where}: node group {name!r} has no cpu, memory or gpu")
        groups.append(NodeGroup(name, count, allocatable))
    if not groups:
        raise InputError(f"{path}: no node groups")
    return tuple(groups)


def read_workload(path: Path, curves: Mapping[str, Curve]) -> tuple[JobSpec, ...]:
    """The jobs, in submission order (ties by file order)."""
    jobs = []
    seen: set[str] = set()
    for line, row in _rows(path, WORKLOAD_COLUMNS):
        where = _where(path, line)
        name = _unique(row, seen, "job", where)
        low = _int(row, "min_workers", where, low=1)
        high = _int(row, "max_workers", where, low=1)
        requested = _int(row, "requested_workers", where, low=1)
        if high < low:
            raise InputError(f"{where}: max_workers {high} is below min_workers {low}")
        if not low <= requested <= high:
            raise InputError(
                f"{where}: requested_workers {requested} is outside min_workers..max_workers "
                f"({low}..{high})"
            )
        worker = _resources(row, where)
        if worker.is_zero:
            raise InputError(f"{where}: job {name!r}: a worker requests no cpu, memory or gpu")
        curve = row["curve"]
        if curve not in curves:
            raise InputError(f"{where}: curve {curve!r} is not in the curves file")
        jobs.append(
            JobSpec(
                name,
                _float(row, "submit_seconds", where),
                low,
                high,
                requested,
                worker,
                _float(row, "work_samples", where, positive=True),
                curve,
                _int(row, "priority", where),
            )
        )
    if not jobs:
        raise InputError(f"{path}: no jobs")
    return tuple(sorted(jobs, key=lambda j: j.submit))


def read_background(path: Path) -> tuple[BackgroundStep, ...]:
    """The background service steps, in time order."""
    steps = []
    last = -math.inf
    for line, row in _rows(path, BACKGROUND_COLUMNS):
        where = _where(path, line)
        time = _float(row, "time_seconds", where)
        if time < last:
            raise InputError(f"{where}: time_seconds {time:g} goes back in time (after {last:g})")
        last = time
        requests = _resources(row, where)
        if requests.is_zero:
            raise InputError(f"{where}: a service pod requests no cpu, memory or gpu")
        steps.append(
            BackgroundStep(
                time, _int(row, "pods", where, low=0), requests, _int(row, "priority", where)
            )
        )
    return tuple(steps)


def _calibrate(table: PlacementTable, one_worker: float) -> PlacementTable:
    return table.calibrated(one_worker) if isinstance(table, _RawPlacements) else table


def workers_that_fit(nodes: Sequence[NodeGroup], worker: Resources) -> int:
    """How many workers of this size an empty cluster holds."""
    total = 0
    for group in nodes:
        per_node = math.inf
        for need, have in (
            (worker.cpu, group.allocatable.cpu),
            (worker.memory, group.allocatable.memory),
            (worker.gpu, group.allocatable.gpu),
        ):
            if need > 0:
                per_node = min(per_node, math.floor(have / need * (1 + 1e-9)))
        total += group.count * (0 if per_node == math.inf else int(per_node))
    return total


def load_workload(
    workload: Path,
    curves: Path,
    cluster: Path,
    background: Path | None = None,
    placements: Path | None = None,
) -> Workload:
    """Read and cross-check all the files.

    Raises:
        InputError: the first problem found, as one line.
    """
    curve_map = read_curves(curves)
    if placements is not None:
        raw = read_placements(placements)
        for name, table in raw.items():
            curve = curve_map.get(name)
            if curve is None:
                raise InputError(f"{placements}: curve {name!r} is not in the curves file")
            one = curve.throughput(1)
            curve_map[name] = Curve(name, curve.points, _calibrate(table, one))
    nodes = read_cluster(cluster)
    jobs = read_workload(workload, curve_map)
    for job in jobs:
        room = workers_that_fit(nodes, job.worker)
        if job.requested > room:
            raise InputError(
                f"{workload}: job {job.name!r}: {job.requested} requested workers "
                f"({job.worker.describe()} each) never fit: the empty cluster holds {room}"
            )
    steps = read_background(background) if background is not None else ()
    return Workload(jobs, curve_map, nodes, steps)


def scale_arrivals(workload: Workload, factor: float) -> Workload:
    """The same jobs submitted at ``factor`` times their submission times.

    0.5 is twice the arrival rate: the same work offered in half the time, a heavier load on
    the same cluster. The background service keeps its own times.
    """
    if factor == 1.0:
        return workload
    jobs = tuple(replace(j, submit=j.submit * factor) for j in workload.jobs)
    return replace(workload, jobs=jobs)
