"""Metric traces: recorded samples per pod or per object, from CSV, JSON or Prometheus.

A trace is a list of samples `(time_seconds, metric, pod | object, value)`. Rows naming a
`pod` are per-pod samples (a Pods or Resource metric); rows naming an `object` are one value
for the whole object (an Object or External metric, or a job-level total). Values hold until
the next sample of the same series (sample-and-hold), like a metrics adapter serving the
latest scrape.
"""

from __future__ import annotations

import bisect
import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import requests

from edl_sim.hpa.errors import TraceError

REQUIRED_COLUMNS = ("time_seconds", "metric", "value")


@dataclass(frozen=True)
class TracePoint:
    """One recorded value; exactly one of `pod` and `object` is set."""

    time: float
    metric: str
    value: Decimal
    pod: str | None = None
    object: str | None = None


@dataclass
class _Series:
    times: list[float] = field(default_factory=list)
    values: list[Decimal] = field(default_factory=list)

    def at(self, t: float) -> Decimal | None:
        index = bisect.bisect_right(self.times, t) - 1
        return self.values[index] if index >= 0 else None


class MetricTrace:
    """Samples indexed by metric and series, answering "what was the value at time t"."""

    def __init__(self, samples: Iterable[TracePoint]) -> None:
        self._pods: dict[str, dict[str, _Series]] = {}
        self._objects: dict[str, dict[str, _Series]] = {}
        ordered = sorted(samples, key=lambda s: s.time)
        if not ordered:
            raise TraceError("the trace has no samples")
        for s in ordered:
            table = self._pods if s.pod is not None else self._objects
            key = s.pod if s.pod is not None else (s.object or "")
            series = table.setdefault(s.metric, {}).setdefault(key, _Series())
            series.times.append(s.time)
            series.values.append(s.value)
        self.start = ordered[0].time
        self.end = ordered[-1].time

    @property
    def metrics(self) -> frozenset[str]:
        """Names of all metrics in the trace."""
        return frozenset(self._pods) | frozenset(self._objects)

    def has_pod_series(self, metric: str) -> bool:
        """True when the metric was recorded per pod."""
        return metric in self._pods

    def pod_values(self, metric: str, t: float) -> dict[str, Decimal]:
        """Each recorded pod's latest value at `t` (pods with no sample yet are absent)."""
        out: dict[str, Decimal] = {}
        for pod, series in sorted(self._pods.get(metric, {}).items()):
            value = series.at(t)
            if value is not None:
                out[pod] = value
        return out

    def object_values(self, metric: str, t: float) -> list[Decimal]:
        """Latest value of each object series of the metric at `t` (usually one)."""
        values = (series.at(t) for _, series in sorted(self._objects.get(metric, {}).items()))
        return [v for v in values if v is not None]

    def total(self, metric: str, t: float) -> Decimal | None:
        """Job-level total: the object value(s) if recorded, else the sum over pods."""
        objects = self.object_values(metric, t)
        if objects:
            return Decimal(sum(objects))
        pods = self.pod_values(metric, t)
        return Decimal(sum(pods.values())) if pods else None


def _decimal(raw: object, where: str) -> Decimal:
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation as e:
        raise TraceError(f"{where}: value {raw!r} is not a number") from e
    if not value.is_finite():
        raise TraceError(f"{where}: value {raw!r} is not finite")
    return value


def _sample(row: Mapping[str, Any], where: str) -> TracePoint:
    time = _decimal(row.get("time_seconds"), f"{where} time_seconds")
    metric = str(row.get("metric") or "").strip()
    if not metric:
        raise TraceError(f"{where}: empty metric name")
    pod = str(row.get("pod") or "").strip() or None
    obj = str(row.get("object") or "").strip() or None
    if pod is None and obj is None:
        raise TraceError(f"{where}: neither pod nor object is set")
    return TracePoint(float(time), metric, _decimal(row.get("value"), f"{where} value"), pod, obj)


def _check_columns(columns: Sequence[str], where: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise TraceError(f"{where}: missing column(s): {', '.join(missing)}")
    if "pod" not in columns and "object" not in columns:
        raise TraceError(f"{where}: missing column: pod or object")


def load_csv(path: Path) -> MetricTrace:
    """Read a CSV trace with columns time_seconds, metric, value and pod and/or object."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            _check_columns(reader.fieldnames or [], str(path))
            samples = [_sample(row, f"{path}:{i + 2}") for i, row in enumerate(reader)]
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from e
    except csv.Error as e:
        raise TraceError(f"{path}: bad CSV: {e}") from e
    return MetricTrace(samples)


def load_json(path: Path) -> MetricTrace:
    """Read a JSON trace: a list of sample objects, or `{"samples": [...]}`."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: bad JSON at line {e.lineno}: {e.msg}") from e
    rows = document.get("samples") if isinstance(document, dict) else document
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TraceError(f'{path}: expected a list of samples or {{"samples": [...]}}')
    columns = sorted({key for row in rows for key in row})
    _check_columns(columns, str(path))
    return MetricTrace(_sample(row, f"{path}: sample {i}") for i, row in enumerate(rows))


def load_trace(path: Path) -> MetricTrace:
    """Read a trace file, choosing the format by its suffix (.json, else CSV)."""
    if path.suffix.lower() == ".json":
        return load_json(path)
    return load_csv(path)


@dataclass(frozen=True)
class PrometheusQuery:
    """A range query against the Prometheus HTTP API (`/api/v1/query_range`)."""

    url: str
    query: str
    start: float
    end: float
    step: float
    metric: str | None = None
    """Metric name to file the samples under (default: the series' `__name__`)."""
    pod_label: str = "pod"
    """Label naming the pod; series without it become object samples."""
    timeout: float = 30.0


def load_prometheus(query: PrometheusQuery, session: requests.Session | None = None) -> MetricTrace:
    """Run the range query and turn the matrix into samples (times relative to `start`)."""
    client = session or requests.Session()
    endpoint = query.url.rstrip("/") + "/api/v1/query_range"
    params: dict[str, str | float] = {
        "query": query.query,
        "start": query.start,
        "end": query.end,
        "step": query.step,
    }
    try:
        response = client.get(endpoint, params=params, timeout=query.timeout)
    except requests.RequestException as e:
        raise TraceError(f"Prometheus at {query.url} did not answer: {e}") from e
    try:
        body = response.json()
    except ValueError as e:
        raise TraceError(f"Prometheus answered HTTP {response.status_code} without JSON") from e
    if response.status_code != 200 or body.get("status") != "success":
        detail = body.get("error") if isinstance(body, dict) else None
        raise TraceError(f"Prometheus query failed (HTTP {response.status_code}): {detail}")
    data = body.get("data") or {}
    if data.get("resultType") != "matrix":
        raise TraceError(f"Prometheus returned {data.get('resultType')!r}, expected a matrix")
    samples: list[TracePoint] = []
    for series in data.get("result") or []:
        labels = series.get("metric") or {}
        name = query.metric or labels.get("__name__") or query.query
        pod = labels.get(query.pod_label)
        obj = None if pod else ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or name
        for stamp, raw in series.get("values") or []:
            value = _decimal(raw, f"Prometheus series {labels}")
            samples.append(TracePoint(float(stamp) - query.start, name, value, pod, obj))
    if not samples:
        raise TraceError(f"Prometheus returned no samples for {query.query!r}")
    return MetricTrace(samples)
