"""Trainer reports: the files through which a trainer hands its counters to the agent.

Policy:
- One file per trainer incarnation, `trainer-<incarnation>.json` in the metrics directory,
  rewritten whole by the trainer a few times a second (write to a dot-file, then `os.replace`,
  so a reader never sees half a file, even if the trainer is killed mid-write).
- Files are never deleted while the agent runs: the agent sums the counters of every file, so a
  trainer restart (a new incarnation starting from zero) cannot make a pod's counters go back.
- JSON, not a binary layout: a flush (a few hundred µs, mostly the write and rename, which
  release the GIL) runs on a background thread about once a second, a scrape reads a handful
  of small files, and `cat` is the debugger. The training loop itself only does arithmetic.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.errors import MetricsDirError
from agent.trainer.recording import RecorderSnapshot

REPORT_FORMAT = 1
_REPORT_NAME = re.compile(r"^trainer-(\d+)\.json$")


@dataclass(frozen=True)
class TrainerReport:
    """One trainer incarnation's counters, as last flushed."""

    incarnation: int
    pid: int
    started_unix: float
    updated_unix: float
    rank: int
    world_size: int
    generation: int
    counters: RecorderSnapshot


def report_path(metrics_dir: Path, incarnation: int) -> Path:
    """Where incarnation `incarnation` writes its report."""
    return metrics_dir / f"trainer-{incarnation:06d}.json"


def write_report(path: Path, report: TrainerReport) -> None:
    """Atomically replaces `path` with `report` (temporary dot-file + rename)."""
    doc = asdict(report)
    doc["format"] = REPORT_FORMAT
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")
    os.replace(tmp, path)


def _parse(doc: Any) -> TrainerReport:
    if not isinstance(doc, dict) or doc.get("format") != REPORT_FORMAT:
        raise ValueError("not a format-1 trainer report")
    c = doc["counters"]
    counters = RecorderSnapshot(
        steps=int(c["steps"]),
        samples=int(c["samples"]),
        step_seconds_sum=float(c["step_seconds_sum"]),
        step_bucket_bounds=tuple(float(b) for b in c["step_bucket_bounds"]),
        step_bucket_counts=tuple(int(n) for n in c["step_bucket_counts"]),
        comm_seconds=float(c["comm_seconds"]),
        comm_bytes=int(c["comm_bytes"]),
        comm_calls=int(c["comm_calls"]),
        last_step_unix=None if c["last_step_unix"] is None else float(c["last_step_unix"]),
        progress=None if c.get("progress") is None else float(c["progress"]),
        global_step=None if c.get("global_step") is None else int(c["global_step"]),
        scalars=tuple((str(k), float(v)) for k, v in c.get("scalars", ())),
    )
    if len(counters.step_bucket_counts) != len(counters.step_bucket_bounds) + 1:
        raise ValueError("bucket counts do not match bucket bounds")
    return TrainerReport(
        incarnation=int(doc["incarnation"]),
        pid=int(doc["pid"]),
        started_unix=float(doc["started_unix"]),
        updated_unix=float(doc["updated_unix"]),
        rank=int(doc["rank"]),
        world_size=int(doc["world_size"]),
        generation=int(doc["generation"]),
        counters=counters,
    )


def read_report(path: Path) -> TrainerReport | None:
    """One trainer report, or None when it is missing or unreadable (a reader never waits)."""
    try:
        return _parse(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class ReportScan:
    """What one read of the metrics directory found."""

    reports: tuple[TrainerReport, ...]
    """Readable reports, oldest incarnation first."""
    errors: tuple[str, ...]
    """One line per file that could not be read or parsed (it is skipped, not fatal)."""


def read_reports(metrics_dir: Path) -> ReportScan:
    """Reads every trainer report in `metrics_dir`.

    Raises:
        MetricsDirError: the directory itself cannot be listed.
    """
    try:
        names = sorted(os.listdir(metrics_dir))
    except OSError as e:
        raise MetricsDirError(f"cannot read metrics directory {metrics_dir}: {e}") from e
    reports: list[TrainerReport] = []
    errors: list[str] = []
    for name in names:
        if not _REPORT_NAME.match(name):
            continue
        path = metrics_dir / name
        try:
            reports.append(_parse(json.loads(path.read_text(encoding="utf-8"))))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError) as e:
            errors.append(f"{path}: {e}")
    reports.sort(key=lambda r: r.incarnation)
    return ReportScan(tuple(reports), tuple(errors))


def next_incarnation(metrics_dir: Path) -> int:
    """The first incarnation number no report in `metrics_dir` uses yet."""
    used = [int(m.group(1)) for n in os.listdir(metrics_dir) if (m := _REPORT_NAME.match(n))]
    return max(used, default=0) + 1


def prepare_metrics_dir(metrics_dir: Path) -> Path:
    """Creates `metrics_dir` if needed and proves it can be listed, written and read back.

    Raises:
        MetricsDirError: with one line saying what is wrong, for the CLI to print.
    """
    try:
        metrics_dir.mkdir(parents=True, exist_ok=True)
        os.listdir(metrics_dir)
        probe = metrics_dir / f".probe-{os.getpid()}"
        probe.write_bytes(b"ok")
        ok = probe.read_bytes() == b"ok"
        probe.unlink()
    except OSError as e:
        raise MetricsDirError(f"metrics directory {metrics_dir} is not usable: {e}") from e
    if not ok:
        raise MetricsDirError(f"metrics directory {metrics_dir} does not read back what it wrote")
    return metrics_dir.resolve()
