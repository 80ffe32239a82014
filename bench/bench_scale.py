"""The sizer at the Kubernetes scale envelope, on a real kube-apiserver (printed, never asserted).

Per step of the cluster in bench/scale_world.py (500 / 1,000 / 2,000 / 5,000 nodes of 4-8 GPUs or
32-64 CPUs, 30 pods of other work per node, 100 / 300 / 300 / 1,000 elastic jobs with an HPA
each on ``desired_replicas``), grown through the API of the e2e harness's real etcd,
kube-apiserver, kube-controller-manager and kube-scheduler, with kwok as every node's kubelet
(bench/scale_cluster.py), and pods of other work deleted and created again at ``--churn``
a second while measuring, the real ``edl-adapter serve --sizing`` is started afresh and
registered behind the aggregator; then, over ``--window`` seconds:

* **first plan**: from the adapter's start to its first sizing round (every watch listed);
* **round / decide / view**: p50 and p99 of ``edl_adapter_sizing_round_seconds`` (the whole
  round, ``decide`` with the jobs' history, the cluster view), one value per round, and of
  ``edl_adapter_sizing_round_cpu_seconds`` (the round's CPU time: on a busy machine the
  rounds wait for a core, and the difference is that wait);
* **RSS, CPU**: the adapter's resident memory (the most seen while measuring, and its peak
  since it started, the first list included: VmHWM) and CPU (share of one core);
* **API**: p50 / p99 of ``desired_replicas`` (External) and ``pods/*`` (custom, a scraped
  job's ``samples_per_second``) read through kube-apiserver during the churn; beside them, in
  the same window, the floor those reads stand on: *core*, a GET of a job's Deployment that
  kube-apiserver answers itself (no aggregation), and *in adapter*, the adapter's own time
  per request (every route, from its ``edl_adapter_request_duration_seconds`` histogram: the
  bucket's upper bound, so "<= 25" means between 10 and 25 ms);
* **added load**: requests a second and watch bytes a second kube-apiserver served, minus
  the same over a window just before the adapter started (same churn), and the bytes the
  adapter read (``/proc/<pid>/io``).

With ``--capture``, each step's cluster and sizing history, as the adapter's own watches and
history store read them, go to a file that bench/scale_capture.py replays in-process (where a
real round spends its CPU). Then the membership of one job of 100 / 500 / 1,000 members
through the Kubernetes backend, before and after issue 38's coordinator
(bench/scale_membership.py). Figures go to stdout and ``<work dir>/bench-scale.json``. The
machine's load is printed beside them: on 2 shared cores every figure includes the other
processes' share.

    make bench-scale                                   # every step, then membership
    .venv/bin/python bench/bench_scale.py --steps 5000:1000 --no-membership --capture
    .venv/bin/python bench/bench_scale.py --steps 500:100,1000:300 --no-membership
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import scale_world as world  # noqa: E402
from bench.scale_cluster import Api, Churn, ScaleCluster  # noqa: E402
from tests.e2e.harness.adapter import AdapterSettings, MetricsAdapter  # noqa: E402
from tests.e2e.harness.loadgen import Trainer, serve  # noqa: E402
from tests.e2e.harness.processes import HarnessError  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

STEPS = ((500, 100), (1000, 300), (2000, 300), (5000, 1000))
ROUND = "edl_adapter_sizing_round_seconds"
ROUND_CPU = "edl_adapter_sizing_round_cpu_seconds"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def scrape_sums(text: str, prefixes: tuple[str, ...]) -> dict[str, float]:
    """Sum of every sample whose line starts with one of ``prefixes`` (by prefix)."""
    out = dict.fromkeys(prefixes, 0.0)
    for line in text.splitlines():
        for p in prefixes:
            if line.startswith(p):
                try:
                    out[p] += float(line.rsplit(" ", 1)[1])
                except ValueError:
                    pass
    return out


APISERVER = ("apiserver_request_total{", "apiserver_watch_events_total{",
             "apiserver_watch_events_sizes_sum{")  # fmt: skip


def apiserver_counters(api: Api) -> tuple[float, dict[str, float]]:
    return time.monotonic(), scrape_sums(api.call("GET", "/metrics").text, APISERVER)


def rates(a: tuple[float, dict[str, float]], b: tuple[float, dict[str, float]]) -> dict[str, float]:
    dt = max(1e-9, b[0] - a[0])
    return {k: (b[1][k] - a[1][k]) / dt for k in a[1]}


REQUEST_BUCKET = "edl_adapter_request_duration_seconds_bucket{"
SAMPLED = "&".join(
    f"name[]={name}"
    for name in (
        f"{ROUND}_sum", f"{ROUND}_count", f"{ROUND_CPU}_sum", f"{ROUND_CPU}_count",
        REQUEST_BUCKET.rstrip("{"),
    )
)  # fmt: skip


def request_buckets(text: str) -> dict[float, float]:
    """The adapter's request-latency histogram, every route and code summed: le -> count."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(REQUEST_BUCKET):
            continue
        labels, _, value = line.rpartition(" ")
        le = labels.split('le="', 1)[1].split('"', 1)[0]
        bound = float("inf") if le == "+Inf" else float(le)
        out[bound] = out.get(bound, 0.0) + float(value)
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding the q-quantile of what was observed between two
    reads of a cumulative histogram; NaN when nothing was."""
    deltas = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return float("nan")
    return next(le for le, cumulative in deltas if cumulative >= q * total)


@dataclass
class Sample:
    """What the sampler saw of the adapter."""

    rounds: dict[str, list[float]] = field(
        default_factory=lambda: {"round": [], "decide": [], "snapshot": [], "cpu": []}
    )
    rss: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    read_bytes: float = 0.0
    seconds: float = 0.0
    peak_rss: float = 0.0
    requests_before: dict[float, float] = field(default_factory=dict)
    requests_after: dict[float, float] = field(default_factory=dict)


def peak_rss(pid: int) -> float:
    """The process's largest resident size since it started (VmHWM), in bytes: the first
    list included, which the sampler (from the first plan on) does not see."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1]) * 1024
    return 0.0


class Sampler:
    """Reads the adapter's /metrics and its process every half second, in a thread."""

    def __init__(self, adapter: MetricsAdapter, session: requests.Session) -> None:
        self._adapter = adapter
        self._session = session
        assert adapter.process.pid is not None
        self._proc = psutil.Process(adapter.process.pid)
        self._stop = threading.Event()
        self.sample = Sample()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _metrics(self) -> str:
        """Only the series read here (``name[]``): the whole page, with 1,000 jobs' series,
        costs the adapter's event loop far more than these, twice a second."""
        verify = self._session.verify
        url = f"{self._adapter.url}/metrics?{SAMPLED}"
        return self._session.get(url, timeout=30, verify=verify).text

    def round_totals(self, text: str | None = None) -> dict[str, tuple[float, float]]:
        text = self._metrics() if text is None else text
        out: dict[str, tuple[float, float]] = {}
        for part in ("round", "decide", "snapshot"):
            sums = scrape_sums(
                text, (f'{ROUND}_sum{{part="{part}"}}', f'{ROUND}_count{{part="{part}"}}')
            )
            values = list(sums.values())
            out[part] = (values[0], values[1])
        cpu = list(scrape_sums(text, (f"{ROUND_CPU}_sum ", f"{ROUND_CPU}_count ")).values())
        out["cpu"] = (cpu[0], cpu[1])
        return out

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Sample:
        self._stop.set()
        self._thread.join(60)
        return self.sample

    def _run(self) -> None:
        t0 = time.monotonic()
        cpu0 = sum(self._proc.cpu_times()[:2])
        io0 = self._proc.io_counters().read_chars
        first = page = self._metrics()
        last = self.round_totals(first)
        while not self._stop.wait(0.5):
            try:
                text = self._metrics()
                now = self.round_totals(text)
                self.sample.rss.append(self._proc.memory_info().rss)
            except (requests.RequestException, psutil.Error):
                continue
            page = text
            for part, (total, count) in now.items():
                before_total, before_count = last[part]
                if count > before_count:  # one value per round (the mean if two were missed)
                    n = int(count - before_count)
                    self.sample.rounds[part].extend([(total - before_total) / n] * n)
            last = now
        self.sample.cpu_s = sum(self._proc.cpu_times()[:2]) - cpu0
        self.sample.read_bytes = self._proc.io_counters().read_chars - io0
        self.sample.seconds = time.monotonic() - t0
        self.sample.peak_rss = peak_rss(self._proc.pid)
        # The request histogram is cumulative: the window's first and last pages are enough.
        self.sample.requests_before = request_buckets(first)
        self.sample.requests_after = request_buckets(page)


class Prober:
    """GETs ``desired_replicas`` and ``pods/*`` through kube-apiserver, 4 a second, in a thread,
    and a job's Deployment from kube-apiserver itself (the floor under the other two)."""

    def __init__(self, api: Api, jobs: int) -> None:
        self._api = api
        self._jobs = jobs
        self._stop = threading.Event()
        self.latency: dict[str, list[float]] = {"desired_replicas": [], "pods/*": [], "core": []}
        self.errors: dict[str, int] = dict.fromkeys(self.latency, 0)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        rnd = random.Random(3)
        while not self._stop.wait(0.25):
            j = rnd.randrange(self._jobs)
            ns, name = world.job_namespace(j), world.job_name(j)
            seconds, status = self._api.timed_get(
                f"{EXTERNAL}/namespaces/{ns}/desired_replicas?labelSelector={world.JOB_LABEL}%3D{name}"
            )
            self._record("desired_replicas", seconds, status)
            s = rnd.randrange(min(self._jobs, world.SCRAPED_JOBS))
            ns, name = world.job_namespace(s), world.job_name(s)
            seconds, status = self._api.timed_get(
                f"{CUSTOM}/namespaces/{ns}/pods/%2A/samples_per_second"
                f"?labelSelector=edl-bench%2Fjob%3D{name}"
            )
            self._record("pods/*", seconds, status)
            j = rnd.randrange(self._jobs)
            ns, name = world.job_namespace(j), world.job_name(j)
            seconds, status = self._api.timed_get(
                f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"
            )
            self._record("core", seconds, status)

    def _record(self, kind: str, seconds: float, status: int) -> None:
        if status == 200:
            self.latency[kind].append(seconds)
        else:
            self.errors[kind] += 1


@dataclass
class StepResult:
    variant: str
    nodes: int
    jobs: int
    pods: int
    running: int
    pending: int
    healthy_s: float
    first_plan_s: float
    rounds: int
    round_p50_s: float
    round_p99_s: float
    decide_p50_s: float
    decide_p99_s: float
    view_p50_s: float
    view_p99_s: float
    round_cpu_p50_s: float
    round_cpu_p99_s: float
    rss_max_mb: float
    rss_peak_mb: float
    cpu_share: float
    desired_p50_ms: float
    desired_p99_ms: float
    desired_errors: int
    pods_p50_ms: float
    pods_p99_ms: float
    pods_errors: int
    core_p50_ms: float
    core_p99_ms: float
    in_adapter_p50_ms: float
    in_adapter_p99_ms: float
    added_requests_per_s: float
    added_watch_events_per_s: float
    added_watch_kb_per_s: float
    adapter_read_kb_per_s: float
    churn_per_s: float
    load_average: float
    components_rss_mb: dict[str, float]


def wait_settled(cluster: ScaleCluster, say: Callable[[str], None]) -> tuple[int, int, int]:
    """Until the Running and Pending counts stop moving (bounded: 20 minutes, plus a second
    for every 50 pods the step has: kwok turns pods Running at about that rate here)."""
    last: list[tuple[int, int, int]] = []

    def still() -> tuple[int, int, int] | None:
        now = cluster.settled()
        last.append(now)
        say(f"  pods {now[0]}, Running {now[1]}, Pending {now[2]}")
        return now if len(last) >= 2 and last[-2] == now else None

    bound = 1200 + cluster.nodes * world.PODS_PER_NODE / 50
    return wait_for(still, timeout_s=bound, interval_s=15, what="pods to settle")


@dataclass(frozen=True)
class Variant:
    """One way of starting the adapter: a name for the table and its extra arguments."""

    name: str
    args: tuple[str, ...] = ()


def parse_variants(text: str) -> list[Variant]:
    """``NAME=ARGS;NAME=ARGS`` (ARGS split on spaces) -> variants; empty -> the default one."""
    variants = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, rest = part.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"bench_scale: --adapter-variants: {part!r} is not NAME=ARGS")
        variants.append(Variant(name.strip(), tuple(rest.split())))
    return variants or [Variant("default")]


def measure_step(
    cluster: ScaleCluster, nodes: int, jobs: int, args: argparse.Namespace,
    say: Callable[[str], None],
) -> list[StepResult]:  # fmt: skip
    """Grow the cluster to the step, then measure each adapter variant in turn (the same
    cluster, the same churn): one row per variant."""
    say(f"== step: {nodes} nodes, {jobs} jobs")
    cluster.grow(nodes, jobs, say)
    pods, running, pending = wait_settled(cluster, say)
    churn = Churn(cluster.api, lambda: cluster.nodes, args.churn / 2)
    churn.start()
    try:
        base_a = apiserver_counters(cluster.api)
        time.sleep(args.baseline)
        base = rates(base_a, apiserver_counters(cluster.api))
        results = [
            measure_adapter(cluster, variant, (nodes, jobs, pods, running, pending), base,
                            churn, args, say)
            for variant in parse_variants(args.adapter_variants)
        ]  # fmt: skip
        if args.capture:
            from bench.scale_capture import capture

            out = capture(cluster.cp.kubeconfig, cluster.work_dir / f"round-{nodes}.pickle")
            say(f"  the cluster and its sizing history as the adapter saw them: {out} "
                f"(bench/scale_capture.py replay {out} --profile)")  # fmt: skip
        return results
    finally:
        churn.close()


def measure_adapter(
    cluster: ScaleCluster, variant: Variant, step: tuple[int, int, int, int, int],
    base: dict[str, float], churn: Churn, args: argparse.Namespace, say: Callable[[str], None],
) -> StepResult:  # fmt: skip
    """A fresh adapter of `variant` from its start to the end of its window."""
    nodes, jobs, pods, running, pending = step
    adapter = MetricsAdapter(
        cluster.cp,
        AdapterSettings(
            pod_selector="app=trainer",
            scrape_interval="5s",
            window="30s",
            access_log=False,
            name=f"edl-adapter-{nodes}-{variant.name}",
            ready_timeout_s=600,
            extra_args=[
                "--sizing",
                f"--sizing-interval={args.sizing_interval}s",
                "--sizing-history-namespace=edl-system",
                "--log-level=warning",
                *variant.args,
            ],
        ),
    )
    t0 = time.monotonic()
    adapter.start()
    healthy = time.monotonic() - t0
    session = requests.Session()
    assert cluster.cp.pki is not None
    session.cert = (str(cluster.cp.pki.admin.cert), str(cluster.cp.pki.admin.key))
    session.verify = str(cluster.cp.pki.ca.cert)
    try:
        adapter.register()
        sampler = Sampler(adapter, session)
        wait_for(
            lambda: sampler.round_totals()["round"][1] >= 1,
            timeout_s=900, interval_s=0.2, what="the adapter's first sizing round",
        )  # fmt: skip
        first = time.monotonic() - t0
        say(f"  {variant.name}: first plan {first:.1f} s after the adapter's start "
            f"(healthy: {healthy:.1f} s)")  # fmt: skip
        adapter.wait_available(timeout_s=300)
        probe = Prober(cluster.api, jobs)
        a = apiserver_counters(cluster.api)
        done_before = churn.done
        sampler.start()
        probe.start()
        time.sleep(args.window)
        probe.stop()
        sample = sampler.stop()
        b = apiserver_counters(cluster.api)
        churned = (churn.done - done_before) / max(1e-9, sample.seconds)
    finally:
        adapter.stop()
    during = rates(a, b)
    added = {k: during[k] - base[k] for k in during}
    r, d, v = sample.rounds["round"], sample.rounds["decide"], sample.rounds["snapshot"]
    lat = probe.latency
    comps = {}
    for name, pid in cluster.components().items():
        try:
            comps[name] = psutil.Process(pid).memory_info().rss / 2**20
        except psutil.Error:
            pass
    return StepResult(
        variant.name, nodes, jobs, pods, running, pending, healthy, first, len(r),
        quantile(r, 0.5), quantile(r, 0.99), quantile(d, 0.5), quantile(d, 0.99),
        quantile(v, 0.5), quantile(v, 0.99),
        quantile(sample.rounds["cpu"], 0.5), quantile(sample.rounds["cpu"], 0.99),
        max(sample.rss, default=0) / 2**20, sample.peak_rss / 2**20,
        sample.cpu_s / max(1e-9, sample.seconds),
        1000 * quantile(lat["desired_replicas"], 0.5),
        1000 * quantile(lat["desired_replicas"], 0.99),
        probe.errors["desired_replicas"],
        1000 * quantile(lat["pods/*"], 0.5), 1000 * quantile(lat["pods/*"], 0.99),
        probe.errors["pods/*"],
        1000 * quantile(lat["core"], 0.5), 1000 * quantile(lat["core"], 0.99),
        1000 * bucket_quantile(sample.requests_before, sample.requests_after, 0.5),
        1000 * bucket_quantile(sample.requests_before, sample.requests_after, 0.99),
        added[APISERVER[0]], added[APISERVER[1]], added[APISERVER[2]] / 1024,
        sample.read_bytes / max(1e-9, sample.seconds) / 1024, churned,
        os.getloadavg()[0], comps,
    )  # fmt: skip


def at_most(ms: float) -> str:
    """A histogram bucket's upper bound, as printed."""
    return f"<={ms:.3g}"


def print_steps(results: list[StepResult]) -> None:
    print()
    print(f"{'variant':>10} {'nodes':>6} {'pods':>7} {'jobs':>5} {'1st plan':>8} {'rounds':>6} "
          f"{'round p50/p99':>14} {'decide p50/p99':>15} {'view p50/p99':>13} "
          f"{'round CPU p50/p99':>17} {'RSS MB':>7} {'peak MB':>7} "
          f"{'CPU':>5} {'desired ms p50/p99':>18} {'pods/* ms p50/p99':>18} "
          f"{'core ms p50/p99':>16} {'in adapter ms':>13} {'+req/s':>7} "
          f"{'+watch KB/s':>11} {'read KB/s':>9} {'churn/s':>7} {'load':>5}")  # fmt: skip
    for s in results:
        print(f"{s.variant:>10} {s.nodes:>6} {s.pods:>7} {s.jobs:>5} "
              f"{s.first_plan_s:>7.1f}s {s.rounds:>6} "
              f"{s.round_p50_s:>6.2f}/{s.round_p99_s:<6.2f}s {s.decide_p50_s:>6.2f}/"
              f"{s.decide_p99_s:<6.2f}s {s.view_p50_s:>5.2f}/{s.view_p99_s:<5.2f}s "
              f"{s.round_cpu_p50_s:>8.2f}/{s.round_cpu_p99_s:<7.2f}s "
              f"{s.rss_max_mb:>7.0f} {s.rss_peak_mb:>7.0f} {100 * s.cpu_share:>4.0f}% "
              f"{s.desired_p50_ms:>8.0f}/{s.desired_p99_ms:<8.0f} "
              f"{s.pods_p50_ms:>8.0f}/{s.pods_p99_ms:<8.0f} "
              f"{s.core_p50_ms:>7.0f}/{s.core_p99_ms:<7.0f} "
              f"{at_most(s.in_adapter_p50_ms):>6}/{at_most(s.in_adapter_p99_ms):<6} "
              f"{s.added_requests_per_s:>7.1f} "
              f"{s.added_watch_kb_per_s:>11.1f} {s.adapter_read_kb_per_s:>9.1f} "
              f"{s.churn_per_s:>7.1f} {s.load_average:>5.1f}")  # fmt: skip
    first = results[0].variant
    same = [s for s in results if s.variant == first]
    if len(same) >= 2:
        a, b = same[0], same[-1]
        slope = (b.rss_max_mb - a.rss_max_mb) / max(1, b.pods - a.pods) * 10_000
        print(f"\nadapter RSS ({first}): {slope:.1f} MB per 10,000 pods more "
              f"({a.pods} -> {b.pods} pods: "
              f"{a.rss_max_mb:.0f} -> {b.rss_max_mb:.0f} MB)")  # fmt: skip
        work_a, work_b = a.nodes * a.jobs, b.nodes * b.jobs
        print(f"round p50 {a.round_p50_s:.2f} -> {b.round_p50_s:.2f} s for nodes x jobs x "
              f"{work_b / work_a:.0f} and pods x {b.pods / max(1, a.pods):.1f}")  # fmt: skip
    for s in results:
        comps = ", ".join(f"{k} {v:.0f}" for k, v in sorted(s.components_rss_mb.items()))
        print(f"  {s.nodes} nodes ({s.variant}): control plane RSS MB: {comps}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", default=",".join(f"{n}:{j}" for n, j in STEPS),
                    help="nodes:jobs,... (each step grows the previous one)")  # fmt: skip
    ap.add_argument("--window", type=float, default=120.0, help="seconds measured per step")
    ap.add_argument(
        "--baseline",
        type=float,
        default=30.0,
        help="seconds of the API server's load measured before the adapter starts",
    )
    ap.add_argument(
        "--churn",
        type=float,
        default=20.0,
        help="pod changes a second while measuring (half deletes, half creates)",
    )
    ap.add_argument("--sizing-interval", type=float, default=5.0)
    ap.add_argument(
        "--no-kwok",
        action="store_true",
        help="no kubelet: node status written at creation, pods stay Pending-phase",
    )
    ap.add_argument("--no-membership", action="store_true")
    ap.add_argument("--membership-sizes", default="100,500,1000")
    ap.add_argument(
        "--membership-modes",
        default="before,after",
        help="membership before issue 38 (every member watches every Lease, renewals every "
        "1 s) and/or after (one coordinator, renewals every 5 s)",
    )
    ap.add_argument("--no-sizer", action="store_true")
    ap.add_argument(
        "--capture",
        action="store_true",
        help="after each step, write the cluster and its sizing history as the adapter reads "
        "them to <work dir>/round-NODES.pickle, for bench/scale_capture.py replay",
    )
    ap.add_argument(
        "--adapter-variants",
        default="",
        help="NAME=ARGS;NAME=ARGS: measure each step with a fresh adapter per variant, in "
        "turn, with ARGS added to its command line (e.g. two --sizing-interval values)",
    )
    args = ap.parse_args()
    steps = [tuple(int(x) for x in s.split(":")) for s in args.steps.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="edl-bench-scale-"))
    memory = psutil.virtual_memory().total / 2**30
    print(f"work dir {work} (logs in {work / 'logs'}); {psutil.cpu_count()} CPUs, "
          f"{memory:.0f} GiB, load {os.getloadavg()[0]:.1f}")  # fmt: skip

    def say(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

    load_file = work / "load.json"
    load_file.write_text(json.dumps({"samples_per_second": 250}))
    agents = serve("0.0.0.0", 0, Trainer(load_file))  # answers at every loopback pod IP
    threading.Thread(target=agents.serve_forever, daemon=True).start()
    cluster = ScaleCluster(work, kwok=not args.no_kwok)
    cluster.metrics_port = agents.server_address[1]
    results: list[StepResult] = []
    membership: list[dict[str, object]] = []
    try:
        cluster.start()
        if not args.no_membership:
            from bench.scale_membership import measure_membership

            sizes = [int(x) for x in args.membership_sizes.split(",") if x]
            modes = tuple(m for m in args.membership_modes.split(",") if m)
            membership = measure_membership(cluster.cp, sizes, say, modes)
        if not args.no_sizer:
            for nodes, jobs in steps:
                try:
                    results.extend(measure_step(cluster, nodes, jobs, args, say))
                except (HarnessError, AssertionError) as e:
                    say(f"step {nodes}:{jobs} did not complete: {e}")
                    break
                print_steps(results)
    finally:
        cluster.stop()
        agents.shutdown()
        out = work / "bench-scale.json"
        out.write_text(json.dumps({"steps": [asdict(r) for r in results],
                                   "membership": membership}, indent=1))  # fmt: skip
        print(f"\nfigures in {out}")


if __name__ == "__main__":
    main()
