"""Differential check of the HPA model against the real kube-controller-manager.

Three pieces, used by `tests/e2e/edl_sim/test_hpa_differential.py`:

* `read_syncs`: the HPA controller's own account of each sync of one HPA, from
  kube-controller-manager's log (`--vmodule=horizontal=4`): the time of the sync, the metric
  proposal ("Proposing desired replicas"), and the outcome ("Successfully rescaled" with the
  current and new count, "Decided not to scale", or the "failed to compute desired number of
  replicas" error of a frozen sync).
* `StatePoller`: a thread that reads, every ~0.15 s and through kube-apiserver, what the HPA
  reads at a sync: the custom-metrics answer for the Deployment's selector (the same path and
  selector the controller queries) and the pod list. Each snapshot keeps the interval in which
  it was taken. It can also keep a job-level demand split over the job's pods (`set_demand`).
* `replay`: steps a `HorizontalController` through the recorded syncs with the inputs the
  controller saw, and compares each decision with the controller's.

What the controller saw at a sync is bracketed, not known exactly: its metric query and pod
listing happen in the half second before its "Proposing" line. The candidates are the
snapshots taken in that bracket, plus the last one before it and the first one after it
(distinct contents only). The metric timestamp the controller logged pins the first pod's
sample only: the answers are narrowed to that sample, and every other pod's sample may be any
of those seen in the bracket (it may have changed between the controller's read and ours).
A sync is
**ambiguous** when the candidates, or moving the sync time by +-epsilon (history entries at
the edge of a window or period), make the model decide differently; it counts as explained
when one of those decisions is the controller's. Epsilon is `CLOCK_EPSILON_S`; scale events
get the controller's own time for them (see `replay`).
Every other sync is unambiguous and must agree exactly (metric proposal and replica count).
"""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import product
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from edl_common.quantity import milli_value
from edl_sim.hpa import HorizontalController, MetricValues, PodState
from edl_sim.hpa.kube import pod_states

BRACKET_S = 0.5
"""How long before its "Proposing" line the controller may have read metrics and pods."""
CLOCK_EPSILON_S = 0.01
"""Uncertainty of a sync's time as the controller's history sees it: it reads its clock a
few microseconds after the "Proposing" line (recommendations, the windows' cutoffs) and
just before "Successfully rescaled" (scale events); 10 ms is ample."""

_KLOG = re.compile(
    r"^(?P<sev>[IWEF])(?P<mon>\d{2})(?P<day>\d{2}) (?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})"
    r"\.(?P<us>\d{6})\s+\d+ (?P<src>[\w.]+):\d+\] \"(?P<msg>(?:[^\"\\]|\\.)*)\"(?P<rest>.*)$"
)
_KV = re.compile(r"(\w+)=(\"(?:[^\"\\]|\\.)*\"|\S+)")


def _klog_time(m: re.Match[str], year: int) -> float:
    return datetime(
        year,
        int(m["mon"]),
        int(m["day"]),
        int(m["h"]),
        int(m["m"]),
        int(m["s"]),
        int(m["us"]),
    ).timestamp()  # klog prints local time, as Python's naive datetime reads it


_GO_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)? ([+-]\d{4})")


def _go_time(text: str) -> int | None:
    """Go's `time.Time.String()` ("2026-11-29 15:14:04 +0000 UTC") -> Unix seconds."""
    m = _GO_TIME.match(text)
    if m is None:
        return None
    return int(datetime.strptime(f"{m[1]} {m[2]}", "%Y-%m-%d %H:%M:%S %z").timestamp())


def _fields(rest: str) -> dict[str, str]:
    return {k: v[1:-1] if v.startswith('"') else v for k, v in _KV.findall(rest)}


@dataclass(frozen=True)
class Sync:
    """One reconcile of the HPA as kube-controller-manager logged it."""

    time: float
    """Unix time of the "Proposing" line (or of the error, for a frozen sync)."""
    current: int | None
    """The scale's spec.replicas at the sync (None for a frozen sync: not logged)."""
    proposed: int | None
    """The metrics' proposal (`metricDesiredReplicas`); None when frozen."""
    desired: int | None
    """The count the scale was left at; None when frozen."""
    frozen: bool = False
    note: str = ""
    rescaled_at: float | None = None
    """Unix time of the "Successfully rescaled" line (the scale event's time), if any."""
    metric_stamp: int | None = None
    """The metric's timestamp the controller logged (Unix seconds; the API's timestamps have
    second resolution): the adapter's sample time of the first pod in its answer."""


def read_syncs(log: Path, namespace: str, target: str, since: float = 0.0) -> list[Sync]:
    """The syncs of the HPA on `Deployment/<namespace>/<target>`, oldest first."""
    reference = f"Deployment/{namespace}/{target}"
    hpa_key = f"{namespace}/{target}"
    year = datetime.now().year
    syncs: list[Sync] = []
    pending: tuple[float, int, int | None] | None = None
    for line in log.read_text(errors="replace").splitlines():
        if namespace not in line or "horizontal.go" not in line:
            continue
        m = _KLOG.match(line)
        if m is None:
            continue
        t = _klog_time(m, year)
        if t < since:
            continue
        msg, kv = m["msg"], _fields(m["rest"])
        if msg == "Proposing desired replicas" and kv.get("scaleTarget") == reference:
            pending = (t, int(kv["desiredReplicas"]), _go_time(kv.get("timestamp", "")))
        elif msg == "Successfully rescaled" and kv.get("HPA") == hpa_key:
            current, desired = int(kv["currentReplicas"]), int(kv["desiredReplicas"])
            if pending is None:  # min/max branch: no metric proposal
                syncs.append(Sync(t, current, None, desired, note=kv.get("reason", "")))
            else:
                syncs.append(
                    Sync(
                        pending[0],
                        current,
                        pending[1],
                        desired,
                        rescaled_at=t,
                        metric_stamp=pending[2],
                    )
                )
            pending = None
        elif msg == "Decided not to scale" and kv.get("scaleTarget") == reference:
            if pending is not None:
                desired = int(kv["desiredReplicas"])
                syncs.append(
                    Sync(pending[0], desired, pending[1], desired, metric_stamp=pending[2])
                )
            pending = None
        elif (
            m["sev"] == "E"
            and f"{reference}:" in kv.get("err", "")
            and "failed to compute desired number of replicas" in kv.get("err", "")
        ):
            syncs.append(Sync(t, None, None, None, frozen=True, note=kv["err"][-160:]))
            pending = None
    return syncs


@dataclass(frozen=True)
class Snapshot:
    """One read through kube-apiserver, taken between `t0` and `t1` (Unix seconds)."""

    t0: float
    t1: float
    value: Any


def _bracket(snaps: Sequence[Snapshot], sync: Sync) -> list[Snapshot]:
    """Distinct snapshots that may hold what the controller saw just before the sync.

    The last read before the bracket, the reads in it, and the first read after the sync
    (the controller may have read after the last of ours; that read may also show the sync's
    own effects, which only widens the set of candidate decisions).
    """
    t = sync.time
    lo = t - BRACKET_S
    before = [s for s in snaps if s.t1 < lo]
    inside = [s for s in snaps if s.t1 >= lo and s.t0 <= t]
    after = [s for s in snaps if s.t0 > t][:1]
    return _distinct(before[-1:] + inside + after)


def _metric_candidates(snaps: Sequence[Snapshot], sync: Sync) -> list[Snapshot]:
    """The answers the controller may have read: the first pod's sample is the logged one,
    any other pod's is any of its samples seen around the sync.

    Each answer's first item carries the adapter's sample time of that pod, which the
    controller logs, so it pins the first pod's sample: the bracket's answers with that
    timestamp are the bases (when the bracket has none, the answers with it from 2 s before to
    0.5 s after). It pins no other pod's sample: each of those may have changed between the
    controller's read and ours, so every sample of another pod seen in the bracket is a
    candidate for it too (all combinations, up to `MAX_COMBINATIONS` per base; beyond, each
    pod's variants one at a time and the all-oldest/all-newest ones). A sync whose decision
    depends on which of them the controller read is then ambiguous, not a disagreement.
    """
    bracket = _bracket(snaps, sync)
    if sync.metric_stamp is None:
        return bracket
    stamped = [s for s in bracket if s.value is not None and s.value.stamp == sync.metric_stamp]
    if not stamped:
        stamped = _distinct(
            [
                s
                for s in snaps
                if sync.time - 2.0 <= s.t0 <= sync.time + 0.5
                and s.value is not None
                and s.value.stamp == sync.metric_stamp
            ]
        )
    if not stamped:
        return bracket
    samples: dict[str, set[tuple[int, int]]] = {}  # pod -> {(sample time, milli value)}
    for s in [*bracket, *stamped]:
        if s.value is not None:
            for pod, v in s.value.values.items():
                samples.setdefault(pod, set()).add((s.value.stamps.get(pod, 0), v))
    candidates: list[Snapshot] = []
    for base in stamped:
        read: MetricRead = base.value
        others = {
            pod: sorted(samples[pod]) for pod in read.values if pod != read.first and pod in samples
        }
        for combo in _combinations(others):
            values = {**read.values, **{pod: v for pod, (_, v) in combo.items()}}
            stamps = {**read.stamps, **{pod: t for pod, (t, _) in combo.items()}}
            candidates.append(
                replace(base, value=MetricRead(values, read.stamp, stamps, read.first))
            )
    return _distinct(candidates)


MAX_COMBINATIONS = 256
"""Above this many combinations of other pods' samples, fewer are tried (see below)."""


def _combinations(
    options: dict[str, list[tuple[int, int]]],
) -> list[dict[str, tuple[int, int]]]:
    """Every choice of one sample per pod; past `MAX_COMBINATIONS`, the all-oldest and
    all-newest choices and each pod's samples with the others at their newest."""
    pods = sorted(options)
    total = 1
    for pod in pods:
        total *= len(options[pod])
    if total <= MAX_COMBINATIONS:
        return [
            dict(zip(pods, choice, strict=True)) for choice in product(*(options[p] for p in pods))
        ]
    newest = {p: options[p][-1] for p in pods}
    chosen = [{p: options[p][0] for p in pods}, newest]
    chosen += [{**newest, p: sample} for p in pods for sample in options[p][:-1]]
    return chosen


def _distinct(chosen: Sequence[Snapshot]) -> list[Snapshot]:
    distinct: list[Snapshot] = []
    for s in chosen:
        if all(s.value != d.value for d in distinct):
            distinct.append(s)
    return distinct


@dataclass
class StatePoller:
    """Polls the metric answer and the pod list the HPA reads; optionally splits a demand.

    `demand` (samples/s for the whole job) is written to the job's load file divided by the
    number of live pods, so the per-pod rate falls as the job grows (like a fixed global
    batch), instead of every pod reporting the same rate whatever the count.
    """

    server: str
    cert: tuple[str, str]
    ca: str
    namespace: str
    selector: str
    metric: str
    write_load: Callable[[float], None]
    interval_s: float = 0.15
    metrics: list[Snapshot] = field(default_factory=list)
    pods: list[Snapshot] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    demand: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _written: float = -1.0
    _split_lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpa-diff-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def set_demand(self, demand: float) -> None:
        self.demand = demand
        self._split(self._live_pods())

    def _live_pods(self) -> int:
        if not self.pods or self.pods[-1].value is None:
            return 1
        return max(1, sum(1 for p in self.pods[-1].value if not p.deleting))

    def _split(self, live: int) -> None:
        # Called from the test (set_demand) and from the poller thread.
        with self._split_lock:
            per_pod = self.demand / live
            if per_pod != self._written:
                self.write_load(per_pod)
                self._written = per_pod

    def _run(self) -> None:
        sel = quote(self.selector, safe="")
        metrics_url = (
            f"{self.server}/apis/custom.metrics.k8s.io/v1beta2/namespaces/{self.namespace}"
            f"/pods/%2A/{self.metric}?labelSelector={sel}"
        )
        pods_url = f"{self.server}/api/v1/namespaces/{self.namespace}/pods?labelSelector={sel}"
        with requests.Session() as session:
            for _ in range(100_000):  # bounded; stop() ends it long before
                if self._stop.is_set():
                    return
                self.pods.append(self._read(session, pods_url, _pods))
                try:
                    self._split(self._live_pods())
                except OSError as e:  # one failed write must not end the recording
                    self.errors.append(f"load split: {e!r}")
                self.metrics.append(self._read(session, metrics_url, _metric_values))
                self._stop.wait(self.interval_s)

    def _read(self, session: requests.Session, url: str, decode: Callable[[Any], Any]) -> Snapshot:
        t0 = time.time()
        try:
            # verify/cert per request: a session's would lose to REQUESTS_CA_BUNDLE
            r = session.get(url, cert=self.cert, verify=self.ca, timeout=5)
            value = decode(r.json()) if r.status_code == 200 else None
            if r.status_code != 200:
                self.errors.append(f"{url} -> {r.status_code}")
        except Exception as e:  # the poller must outlive any one bad read
            value = None
            self.errors.append(f"{url}: {e!r}")
        return Snapshot(t0, time.time(), value)


def _pods(body: Any) -> tuple[PodState, ...]:
    return pod_states(body)


@dataclass(frozen=True)
class MetricRead:
    """The custom-metrics answer: per-pod milli values and the first item's timestamp."""

    values: dict[str, int]
    stamp: int | None
    stamps: dict[str, int] = field(default_factory=dict)
    """Each pod's sample time (Unix seconds), which tells one sample of a pod from the next."""
    first: str | None = None
    """The pod of the first item: the one whose sample time the controller logs."""


def _metric_values(body: Any) -> MetricRead:
    items = body.get("items") or []
    stamp = None
    if items:
        stamp = _stamp(items[0]["timestamp"])
    values = {i["describedObject"]["name"]: milli_value(str(i["value"])) for i in items}
    stamps = {i["describedObject"]["name"]: _stamp(i["timestamp"]) for i in items}
    first = str(items[0]["describedObject"]["name"]) if items else None
    return MetricRead(values, stamp, stamps, first)


def _stamp(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp())


Outcome = tuple[int | None, int | None, bool]
"""(metric proposal, replica count left, frozen) -- what is compared at each sync."""


def _outcome(model: HorizontalController, sync: Sync, now: float, inputs: _Inputs) -> Outcome:
    current = sync.current if sync.current is not None else inputs.spec_replicas
    metrics = MetricValues(pods={inputs.metric: inputs.values} if inputs.values else {})
    d = model.step(now, current, metrics, pods=inputs.pods, scaled_at=sync.rescaled_at)
    frozen = d.error is not None and d.metric_replicas is None
    if frozen:
        return (None, None, True)
    return (d.metric_replicas, d.desired_replicas, False)


@dataclass(frozen=True)
class _Inputs:
    metric: str
    values: dict[str, int]
    pods: tuple[PodState, ...]
    spec_replicas: int


@dataclass(frozen=True)
class Verdict:
    """The comparison at one sync."""

    sync: Sync
    real: Outcome
    model: tuple[Outcome, ...]
    """The model's distinct outcomes over the candidate inputs and times."""

    @property
    def ambiguous(self) -> bool:
        return len(self.model) > 1

    @property
    def agrees(self) -> bool:
        return self.real in self.model

    def line(self, t0: float) -> str:
        s = self.sync
        status = "ok" if self.agrees else "DISAGREE"
        kind = "ambiguous" if self.ambiguous else "exact"
        return (
            f"t={s.time - t0:7.2f}s current={s.current} real(proposal,desired,frozen)="
            f"{self.real} model={list(self.model)} {kind} {status} {s.note}".rstrip()
        )


@dataclass
class Report:
    verdicts: list[Verdict]
    unmatched: int = 0
    """Syncs without a metric or pod snapshot around them (not compared)."""
    epsilon: float = 0.0
    """The time uncertainty used (seconds)."""

    @property
    def exact(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.ambiguous]

    @property
    def ambiguous(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.ambiguous]

    @property
    def disagreements(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.agrees]

    def agreement(self) -> float:
        exact = self.exact
        return 100.0 * sum(v.agrees for v in exact) / len(exact) if exact else 0.0

    def summary(self, label: str) -> str:
        return (
            f"{label}: {len(self.verdicts)} syncs compared, {len(self.exact)} unambiguous, "
            f"agreement {self.agreement():.1f}% on unambiguous; ambiguous {len(self.ambiguous)} "
            f"(explained {sum(v.agrees for v in self.ambiguous)}); "
            f"disagreements {len(self.disagreements)}; not compared {self.unmatched}; "
            f"time uncertainty {1000 * self.epsilon:.0f} ms"
        )


def replay(
    model: HorizontalController,
    syncs: Sequence[Sync],
    metric: str,
    metrics: Sequence[Snapshot],
    pods: Sequence[Snapshot],
) -> Report:
    """Steps `model` through `syncs` with the bracketed inputs; compares every decision.

    At each sync the model is tried (on copies) with every candidate input and at the sync
    time +-`CLOCK_EPSILON_S`; then the model itself steps with the first (input, time) whose
    decision is the controller's (or the first candidate if none is), so its history
    follows what the controller did.

    The model stamps a scale event with the sync's time; the controller stamps it when the
    scale update has returned (`storeScaleEvent` calls `time.Now()` after the update, a few
    to tens of ms later, logged as "Successfully rescaled"). That time is an input the
    model's `step()` does not take, so after a rescale the replay moves the model's new
    event to it. Without this, a policy period that ends between the two times decides
    differently (seen with 1 s syncs and integer periods).
    """
    verdicts: list[Verdict] = []
    unmatched = 0
    for sync in syncs:
        metric_cands = _metric_candidates(metrics, sync)
        pod_cands = [p for p in _bracket(pods, sync) if p.value is not None]
        if not metric_cands or not pod_cands:
            unmatched += 1
            continue
        inputs = [
            _Inputs(metric, dict(m.value.values) if m.value else {}, p.value, len(p.value))
            for m in metric_cands
            for p in pod_cands
        ]
        tries = [(cand, sync.time) for cand in inputs]
        tries += [(inputs[0], sync.time + shift) for shift in (-CLOCK_EPSILON_S, CLOCK_EPSILON_S)]
        outcomes = [_outcome(copy.deepcopy(model), sync, now, cand) for cand, now in tries]
        real: Outcome = (sync.proposed, sync.desired, sync.frozen)
        verdicts.append(Verdict(sync, real, tuple(dict.fromkeys(outcomes))))
        cand, now = next((t for t, o in zip(tries, outcomes, strict=True) if o == real), tries[0])
        _outcome(model, sync, now, cand)
    return Report(verdicts, unmatched, CLOCK_EPSILON_S)
