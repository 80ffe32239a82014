"""Issue 25's acceptance: each attack on the real adapter behind a real kube-apiserver.

One control plane (the e2e harness's etcd + kube-apiserver + kube-controller-manager on
127.0.0.1, `make controlplane`) for the whole run; each attack gets a fresh `edl-adapter
serve` registered as the three APIServices (front-proxy authentication and delegated
authorization, as in a cluster), its pods from a static list pointing at one fake agent
process. A legitimate client (the cluster admin over one kept-alive connection to
kube-apiserver, as the HPA) sends the `pods/*` query of ten pods in namespace `legit`
throughout, the APIServices' `Available` condition is read every 2 s, and the adapter's RSS
with it; each attack prints these beside an idle baseline taken on the same adapter in the
same run, then each goal and whether it was met. Attackers run in a process of their own
(`bench/attack_holder.py`). Printed, never asserted.

- `keepalive`: 1,500 unauthenticated TLS connections straight to the adapter, each one
  `GET /healthz` then idle, re-opened when closed. Goals: Available throughout, no legitimate
  query failed, p99 within 3x idle.
- `selectors`: 1,000 pods in `ml`, then 5,000 queries through kube-apiserver, each with a
  distinct `metricLabelSelector` matching every pod. Goal: adapter RSS under 384 MB.
- `exporter`: the agent's real exporter as one more pod; 1,000 idle TCP connections to it,
  then 300 slowloris on top; Prometheus-like scrapes beside the adapter's own. Goals: every
  scrape answered, the pod's value served by the adapter throughout.
- `hostile-target`: pods whose /metrics answers garbage, huge, slow or label-churning bodies
  (normal until the attack starts), for `--hostile-minutes` (10). Goal: RSS flat (the least
  squares slope over the run's second half under 1 MB/min), the legitimate query unharmed.

Three short ones (15 s a phase) on the HTTP front end:

- `path-confusion`: issue 25's `…/namespaces/scratch/pods/a://h/…/namespaces/ml/…` and its
  variants (`tests/support/path_confusion.py`) through kube-apiserver, as a user allowed only
  in `scratch` and as the cluster admin (who gets no SubjectAccessReview, so only the routing
  stands between the path and `ml`). Goal: no answer routed to `ml` (its value, or the
  adapter's own refusal naming namespace `ml`).
- `framing`: `Transfer-Encoding: chunked` beside `Content-Length: 0` (both orders), and a TLS
  close_notify + half-close right after the request, straight to the adapter. Goals: every
  answer a 400 Status; no log line per connection (issue 25: `returning true from
  eof_received()` for each).
- `backlog`: the listen backlogs the kernel holds for the adapter and the agent's exporter
  (sock_diag, what `ss -ltn` shows), and 1,000 simultaneous connects to the adapter every
  second. Goals: 1,024 and 512 (at most `net.core.somaxconn`), the legitimate query unharmed.

Issue 37's, on an adapter given the chart's memory limit as `--memory-budget` (in a pod it
reads the limit from its cgroup); RSS is also read every 0.25 s for its peak:

- `pipelining`: one unauthenticated TLS connection straight to the adapter writing
  `GET /healthz` 200 at a time and reading the answers, then four. Goals: Available, no
  legitimate query failed, p99 within 3x idle, peak RSS at most 80 % of the chart's limit.
- `memory-floods`: 1,500 half-open ClientHellos held from 8 addresses, then 600 slow request
  bodies (`Expect: 100-continue`, a byte every 2 s) from 100 addresses. Goals: peak RSS at
  most 80 % of the chart's limit, Available, no legitimate query failed, no `100 Continue`
  to a stranger (the p99 against idle is shown, not a goal: issue 37 sets one for the
  pipelining attack only).
"""

from __future__ import annotations

import http.server
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edl_common.quantity import parse_quantity  # noqa: E402
from tests.e2e.harness.adapter import AdapterSettings, MetricsAdapter  # noqa: E402
from tests.e2e.harness.controlplane import (  # noqa: E402
    ControlPlane,
    ControlPlaneSettings,
    ensure_binaries,
)
from tests.support.net import free_port, listen_backlog  # noqa: E402
from tests.support.path_confusion import confused_paths  # noqa: E402
from tests.support.pki import issue, load_issued  # noqa: E402
from tests.support.slow_clients import request_then_close_notify  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

API = "/apis/custom.metrics.k8s.io/v1beta2"
LEGIT_PODS = 10
LEGIT = f"{API}/namespaces/legit/pods/%2A/samples_per_second?labelSelector=app%3Dtrainer"
HOLDER = Path(__file__).resolve().parent / "attack_holder.py"
RSS_LIMIT_MB = 384.0
FLAT_MB_PER_MIN = 1.0
CHART_VALUES = ROOT / "charts" / "edl" / "values.yaml"
PEAK_SHARE = 0.8
"""Issue 37: peak RSS under every flood at most this share of the chart's memory limit."""


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def tree_rss_mb(pid: int) -> float:
    """RSS of a process and its children, MB."""
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 1e6


# ----------------------------------------------------------------- the fake agents


class Targets(http.server.BaseHTTPRequestHandler):
    """`/pod/<i>`: a trainer's exposition (samples growing 100/s); `/hostile/<kind>`: the same
    until `hostile` is set, then a hostile answer of that kind (see `HOSTILE`)."""

    protocol_version = "HTTP/1.1"
    started = time.time()
    hostile = threading.Event()
    serial = [0]

    def _normal(self) -> bytes:
        t = time.time() - self.started
        return (
            f"edl_trainer_samples_total {100.0 * t:.3f}\n"
            f"edl_trainer_steps_total {t:.3f}\n"
            'edl_gpu_utilization_ratio{gpu="0"} 0.8\n'
        ).encode()

    def _send(self, body: bytes, length: int | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def _label_sets(self, n: int) -> bytes:
        base = self.serial[0]
        self.serial[0] += n
        lines = (f'edl_gpu_utilization_ratio{{gpu="{base + i}"}} 0.5\n' for i in range(n))
        return self._normal() + "".join(lines).encode()

    def _trickle(self, data: bytes, every_s: float, for_s: float) -> None:
        end = time.monotonic() + for_s
        for i in range(len(data)):
            if time.monotonic() > end:
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(every_s)  # the hostile target's own pace

    def do_GET(self) -> None:
        kind = self.path.removeprefix("/hostile/") if self.path.startswith("/hostile/") else ""
        try:
            if not kind or not self.hostile.is_set():
                self._send(self._normal())
            elif kind == "labels":  # 20,000 new label sets on every answer
                self._send(self._label_sets(20_000))
            elif kind == "churn":  # 300 new label sets on every answer (under the cap)
                self._send(self._label_sets(300))
            elif kind == "garbage":  # 256 KiB of random bytes
                self._send(random.randbytes(256 << 10))
            elif kind == "long-line":  # one 4 MiB token and no newline
                self._send(b"edl_trainer_samples_total" + b"9" * (4 << 20))
            elif kind == "huge":  # announces 1 GiB of valid lines, streams until dropped
                self.send_response(200)
                self.send_header("Content-Length", str(1 << 30))
                self.end_headers()
                chunk = b'edl_gpu_utilization_ratio{gpu="0"} 0.5\n' * 1600
                for _ in range((64 << 20) // len(chunk)):
                    self.wfile.write(chunk)
            elif kind == "slow-body":  # a valid head, then a byte every 0.5 s
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self._trickle(self._normal() * 1000, 0.5, 60)
            elif kind == "slow-head":  # a head that never ends, a byte every 0.5 s
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                self._trickle(b"X-Slow: " + b"a" * 1000, 0.5, 60)
            elif kind == "many-headers":  # 10,000 header lines
                self.send_response(200)
                for i in range(10_000):
                    self.send_header(f"X-H{i}", "x")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_error(404)
        except OSError:
            pass  # the adapter gave up on us, as it should

    def log_message(self, *args: Any) -> None:
        pass


HOSTILE = (
    "labels",
    "churn",
    "garbage",
    "long-line",
    "huge",
    "slow-body",
    "slow-head",
    "many-headers",
)


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the adapter closing a hostile answer early is the point, not news


@contextmanager
def targets() -> Iterator[int]:
    server = _QuietServer(("127.0.0.1", 0), Targets)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        Targets.hostile.clear()
        server.shutdown()
        server.server_close()


def pod(namespace: str, name: str, url: str) -> dict[str, Any]:
    labels = {"app": "trainer"}
    return {"namespace": namespace, "name": name, "labels": labels, "url": url}


def legit_pods(port: int) -> list[dict[str, Any]]:
    return [
        pod("legit", f"trainer-{i}", f"http://127.0.0.1:{port}/pod/{i}") for i in range(LEGIT_PODS)
    ]


# ----------------------------------------------------------------- the cluster


class Cluster:
    """The control plane, and one adapter at a time registered behind it."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.cp = ControlPlane(ControlPlaneSettings(bin_dir=ensure_binaries(), work_dir=work))
        self.adapters: list[MetricsAdapter] = []

    def start(self) -> None:
        self.cp.start()

    def stop(self) -> None:
        for adapter in self.adapters:
            adapter.stop()
        self.cp.stop()

    def session(self) -> requests.Session:
        """A kept-alive admin client of kube-apiserver (the HPA keeps its connection too)."""
        assert self.cp.pki is not None
        s = requests.Session()
        s.trust_env = False  # else REQUESTS_CA_BUNDLE, when set, replaces `verify`
        s.cert = (str(self.cp.pki.admin.cert), str(self.cp.pki.admin.key))
        s.verify = str(self.cp.pki.ca.cert)
        return s

    def adapter(
        self, name: str, pods: list[dict[str, Any]], *extra: str, expect: int = LEGIT_PODS
    ) -> MetricsAdapter:
        """A fresh adapter on a static pod list, registered and Available, serving the
        legitimate query's `expect` pods through kube-apiserver."""
        for old in self.adapters:
            old.stop()
        self.adapters.clear()
        pods_file = self.work / f"{name}-pods.yaml"
        pods_file.write_text(yaml.safe_dump({"pods": pods}))
        settings = AdapterSettings(
            name=name,
            window=None,  # the built-in catalogue (30 s windows)
            access_log=False,
            ready_timeout_s=120,
            extra_args=[
                "--source=static",
                f"--static-file={pods_file}",
                "--log-level=warning",
                *extra,
            ],
        )
        adapter = MetricsAdapter(self.cp, settings)
        self.adapters.append(adapter)
        adapter.start()
        adapter.register()
        adapter.wait_available(timeout_s=180)
        session = self.session()
        wait_for(
            lambda: len(session.get(self.cp.server + LEGIT, timeout=30).json()["items"]) == expect,
            timeout_s=180,
            what=f"{expect} legitimate pods served through kube-apiserver",
            interval_s=1.0,
        )
        return adapter


# ----------------------------------------------------------------- measuring


@dataclass
class Phase:
    """What the legitimate client saw during one phase."""

    label: str
    times: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    checks: int = 0
    unavailable: list[str] = field(default_factory=list)
    rss: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the phase began, MB)."""

    def row(self) -> str:
        rss = [mb for _, mb in self.rss]
        shown = f"{rss[0]:5.0f} -> {rss[-1]:5.0f} (peak {max(rss):.0f})" if rss else "n/a"
        return (
            f"  {self.label:<40} n={len(self.times):4d} failed={len(self.failures):3d} "
            f"p50={pct(self.times, 50):7.1f} p99={pct(self.times, 99):7.1f} ms  "
            f"Available {self.checks - len(self.unavailable)}/{self.checks}  RSS MB {shown}"
        )


def observe(
    cluster: Cluster,
    adapter: MetricsAdapter,
    label: str,
    seconds: float,
    *,
    until: Callable[[], bool] | None = None,
    pace_s: float = 0.2,
    check: Callable[[list[dict[str, Any]]], str | None] | None = None,
) -> Phase:
    """The legitimate query through kube-apiserver every `pace_s` for `seconds` (or until
    `until()`), the APIServices' Available condition and the adapter's RSS every 2 s."""
    phase = Phase(label)
    stop = threading.Event()
    pid = adapter.process.pid
    assert pid is not None
    began = time.monotonic()

    def watch() -> None:
        for _ in range(1_000_000):
            phase.rss.append((time.monotonic() - began, tree_rss_mb(pid)))
            try:
                states = adapter.availability()
            except Exception as e:
                states = {"(read)": ("Error", repr(e)[:120])}
            phase.checks += 1
            bad = [f"{n}: {s} {m[:80]}" for n, (s, m) in states.items() if s != "True"]
            if bad:
                phase.unavailable.append("; ".join(bad))
            if stop.wait(2.0):
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    session = cluster.session()
    url = cluster.cp.server + LEGIT
    end = began + seconds
    while time.monotonic() < end and not (until is not None and until()):
        t = time.perf_counter()
        try:
            r = session.get(url, timeout=30)
            ms = (time.perf_counter() - t) * 1000
            items = r.json().get("items", []) if r.status_code == 200 else []
            problem = None if len(items) >= LEGIT_PODS else f"{r.status_code} {r.text[:100]}"
            if problem is None and check is not None:
                problem = check(items)
            if problem is None:
                phase.times.append(ms)
            else:
                phase.failures.append(problem)
        except (requests.RequestException, ValueError) as e:
            phase.failures.append(repr(e)[:160])
        stop.wait(pace_s)  # the legitimate client's own pace
    stop.set()
    watcher.join(30)
    phase.rss.append((time.monotonic() - began, tree_rss_mb(pid)))
    return phase


class Attack:
    """An attacker process (`attack_holder.py`) and the counts it last reported."""

    def __init__(self, kind: str, port: int, count: int) -> None:
        self.kind, self.count = kind, count
        self.last: dict[str, int] = {"opened": 0, "dropped": 0}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the attacker is this checkout's
        self.proc = subprocess.Popen(
            [sys.executable, str(HOLDER), kind, str(port), str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.last = json.loads(line)
            except ValueError:
                pass

    def wait_opened(self, timeout_s: float = 300) -> None:
        wait_for(
            lambda: self.last["opened"] >= self.count,
            timeout_s=timeout_s,
            what=f"{self.count} {self.kind} connections opened",
            interval_s=0.5,
            give_up=lambda: self.proc.poll() is not None,
        )

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def attack(kind: str, port: int, count: int) -> Iterator[Attack]:
    held = Attack(kind, port, count)
    try:
        held.wait_opened()
        yield held
    finally:
        held.stop()


@dataclass
class Goal:
    text: str
    shown: str
    met: bool

    def line(self) -> str:
        return f"  goal: {self.text}: {self.shown}: {'met' if self.met else 'MISSED'}"


def report(title: str, phases: list[Phase], goals: list[Goal], notes: list[str]) -> list[Goal]:
    print(title, flush=True)
    for phase in phases:
        print(phase.row())
        for problem in (phase.failures[:3], phase.unavailable[:3]):
            for p in problem:
                print(f"      e.g. {p}")
    for note in notes:
        print(f"  {note}")
    for goal in goals:
        print(goal.line(), flush=True)
    return goals


def availability_goal(phase: Phase) -> Goal:
    bad = len(phase.unavailable)
    return Goal(f"APIServices Available ({phase.label})", f"{bad} of {phase.checks} not", not bad)


def failures_goal(phase: Phase) -> Goal:
    n = len(phase.failures)
    return Goal(f"no legitimate query failed ({phase.label})", f"{n} failed", n == 0)


# ----------------------------------------------------------------- the attacks


def keepalive(cluster: Cluster, port: int, seconds: float, count: int) -> list[Goal]:
    adapter = cluster.adapter("attack-keepalive", legit_pods(port), "--scrape-interval=2s")
    idle = observe(cluster, adapter, "idle", seconds)
    with attack("idle-tls", adapter.port, count) as held:
        under = observe(cluster, adapter, f"{count} idle TLS keep-alive", seconds)
        stranger = [fresh_healthz(adapter.port) for _ in range(5)]
        counts = dict(held.last)
    ratio = pct(under.times, 99) / pct(idle.times, 99)
    return report(
        f"keepalive: {count} unauthenticated TLS connections (GET /healthz, then idle, re-opened "
        f"when closed) straight to the adapter, {seconds:.0f} s",
        [idle, under],
        [
            availability_goal(under),
            failures_goal(under),
            Goal("legitimate p99 within 3x idle", f"{ratio:.2f}x", ratio <= 3.0),
        ],
        [
            f"attacker: {counts['opened']} connections opened, {counts['dropped']} closed by the "
            f"adapter (re-opened at once)",
            f"a fresh stranger's GET /healthz during the attack: {stranger}",
        ],
    )


def stranger_context() -> ssl.SSLContext:
    """A TLS client that trusts anything and shows no certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def fresh_healthz(port: int) -> int | str:
    """A stranger's `GET /healthz` on a new TLS connection: the status, or the error's name."""
    try:
        with stranger_context().wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=30)
        ) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return int(s.recv(12)[9:12])
    except (OSError, ValueError) as e:
        return type(e).__name__


def selectors(
    cluster: Cluster, port: int, seconds: float, count: int, budget_s: float
) -> list[Goal]:
    pods = legit_pods(port) + [
        pod("ml", f"trainer-{i}", f"http://127.0.0.1:{port}/pod/{i}") for i in range(1000)
    ]
    adapter = cluster.adapter("attack-selectors", pods, "--scrape-interval=10s", "--stale-after=1h")
    path = f"{API}/namespaces/ml/pods/%2A/gpu_utilization?labelSelector=app%3Dtrainer"
    session = cluster.session()
    wait_for(
        lambda: len(session.get(cluster.cp.server + path, timeout=60).json()["items"]) == 1000,
        timeout_s=300,
        what="1,000 pods served",
        interval_s=2.0,
    )
    idle = observe(cluster, adapter, "idle", seconds)
    sent = [0, 0]  # answered, failed
    next_i = iter(range(count))
    lock = threading.Lock()
    deadline = time.monotonic() + budget_s
    started = time.monotonic()

    def flood() -> None:
        s = cluster.session()
        for _ in range(count):
            with lock:
                i = next(next_i, None)
            if i is None or time.monotonic() > deadline:
                return
            # gpu!=x<i>: a distinct selector that every pod matches (a full answer each)
            url = f"{cluster.cp.server}{path}&metricLabelSelector=gpu%21%3Dx{i}"
            try:
                ok = s.get(url, timeout=60).status_code == 200
            except requests.RequestException:
                ok = False
            with lock:
                sent[0 if ok else 1] += 1

    workers = [threading.Thread(target=flood, daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    under = observe(
        cluster,
        adapter,
        f"{count} distinct selectors",
        budget_s + 60,
        until=lambda: not any(w.is_alive() for w in workers),
    )
    for w in workers:
        w.join(60)
    took = time.monotonic() - started
    peak = max(mb for _, mb in under.rss)
    return report(
        f"selectors: 1,000 pods in `ml`, {count} queries through kube-apiserver, each a "
        f"distinct metricLabelSelector matching every pod (2 clients)",
        [idle, under],
        [
            Goal(
                f"all {count} distinct selectors sent and answered",
                f"{sent[0]} answered, {sent[1]} failed",
                sent[0] == count,
            ),
            Goal(f"adapter RSS under {RSS_LIMIT_MB:.0f} MB", f"peak {peak:.0f} MB", peak < 384),
            availability_goal(under),
            failures_goal(under),
        ],
        [f"{sent[0] + sent[1]} selector queries in {took:.0f} s"],
    )


EXPORTER = """
import sys, threading, time
from prometheus_client import CollectorRegistry, Counter
from agent.exporter import MetricsServer
from agent.readiness import Readiness
r = CollectorRegistry()
c = Counter('edl_trainer_samples_total', 'samples', registry=r)
s = MetricsServer(r, lambda: Readiness(True, 'ok'), '127.0.0.1', int(sys.argv[1]))
s.start()
for _ in range(36000):
    c.inc(10)
    time.sleep(0.1)
"""


def scrapes(port: int, stop: threading.Event, out: list[float], failed: list[str]) -> None:
    """Prometheus-like scrapes of the exporter (a new connection each) until `stop`."""
    for _ in range(100_000):
        t = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            if data.startswith(b"HTTP/1.1 200") and b"edl_trainer_samples_total" in data:
                out.append((time.perf_counter() - t) * 1000)
            else:
                failed.append(repr(data[:60]))
        except OSError as e:
            failed.append(repr(e)[:100])
        if stop.wait(0.25):
            return


def listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), 1):
        return True


def exporter(cluster: Cluster, port: int, seconds: float) -> list[Goal]:
    eport = free_port()
    proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(eport)])  # PYTHONPATH: --code
    try:
        wait_for(
            lambda: listening(eport),
            timeout_s=60,
            what="the exporter listening",
            interval_s=0.2,
        )
        pods = [*legit_pods(port), pod("legit", "exporter-0", f"http://127.0.0.1:{eport}/metrics")]
        adapter = cluster.adapter(
            "attack-exporter", pods, "--scrape-interval=2s", expect=LEGIT_PODS + 1
        )

        def served(items: list[dict[str, Any]]) -> str | None:
            names = {i["describedObject"]["name"] for i in items}
            return None if "exporter-0" in names else "exporter-0 missing from the answer"

        rows: list[tuple[str, list[float], list[str], float, float]] = []
        phases = []
        counts: dict[str, dict[str, int]] = {}

        def phase(label: str) -> None:
            done = threading.Event()
            times: list[float] = []
            failed: list[str] = []
            rss0 = tree_rss_mb(proc.pid)
            scraper = threading.Thread(target=scrapes, args=(eport, done, times, failed))
            scraper.start()
            phases.append(observe(cluster, adapter, label, seconds, check=served))
            done.set()
            scraper.join(60)
            rows.append((label, times, failed, rss0, tree_rss_mb(proc.pid)))

        phase("idle")
        with attack("idle-tcp", eport, 1000) as idle:
            phase("1,000 idle TCP")
            with attack("slowloris", eport, 300) as loris:
                phase("1,000 idle TCP + 300 slowloris")
                counts["slowloris"] = dict(loris.last)
            counts["idle"] = dict(idle.last)
        notes = [
            f"scrapes {label}: {len(t)}/{len(t) + len(f)} answered, p50 {pct(t, 50):.1f} ms, "
            f"p99 {pct(t, 99):.1f} ms; exporter RSS {r0:.0f} -> {r1:.0f} MB"
            + (f"; e.g. {f[0]}" if f else "")
            for label, t, f, r0, r1 in rows
        ]
        notes.append(
            f"attackers: idle {counts['idle']}, slowloris {counts['slowloris']} "
            "(dropped: closed by the exporter, re-opened at once)"
        )
        goals = [
            Goal(
                f"every scrape answered ({label})",
                f"{len(t)}/{len(t) + len(f)}",
                bool(t) and not f,
            )
            for label, t, f, _, _ in rows[1:]
        ]
        goals += [failures_goal(p) for p in phases[1:]]
        return report(
            "exporter: the agent's real exporter as pod exporter-0, with 1,000 idle TCP "
            f"connections, then +300 slowloris, {seconds:.0f} s each; 4 Prometheus-like "
            "scrapes a second beside the adapter's (the legitimate query needs exporter-0)",
            phases,
            goals,
            notes,
        )
    finally:
        proc.terminate()
        proc.wait(10)


def slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, MB per minute."""
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(t for t, _ in points) / n
    my = sum(m for _, m in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 60.0 * sum((t - mx) * (m - my) for t, m in points) / var if var else float("nan")


def hostile_target(cluster: Cluster, port: int, seconds: float, minutes: float) -> list[Goal]:
    pods = legit_pods(port) + [
        pod("ml", f"hostile-{kind}", f"http://127.0.0.1:{port}/hostile/{kind}") for kind in HOSTILE
    ]
    adapter = cluster.adapter("attack-hostile", pods, "--scrape-interval=1s")
    idle = observe(cluster, adapter, "idle (targets still normal)", seconds)
    Targets.hostile.set()
    under = observe(cluster, adapter, f"{minutes:g} min of hostile targets", minutes * 60, pace_s=1)
    Targets.hostile.clear()
    # A leak keeps its rate; a warm-up (arenas, caches, the series cap filling) does not: the
    # goal is on the second half of the run, the whole run's slope is shown beside it.
    half = minutes * 30
    slope = slope_mb_per_min([(t, mb) for t, mb in under.rss if t >= half])
    whole = slope_mb_per_min(under.rss)
    curve = ", ".join(f"{t / 60:.1f}m {mb:.0f}" for t, mb in under.rss[::15])  # every 30 s
    return report(
        f"hostile-target: 10 normal pods + one pod per hostile answer ({', '.join(HOSTILE)}), "
        "scraped every 1 s",
        [idle, under],
        [
            Goal(
                f"RSS flat (least-squares slope over the second half under "
                f"{FLAT_MB_PER_MIN:g} MB/min)",
                f"{slope:+.2f} MB/min (whole run {whole:+.2f} MB/min)",
                slope < FLAT_MB_PER_MIN,
            ),
            availability_goal(under),
            failures_goal(under),
        ],
        [f"RSS curve (minute, MB): {curve}, end {under.rss[-1][1]:.0f}"],
    )


# ----------------------------------------------------------------- the front end's own attacks

SHORT_S = 15.0
"""The phases below are short: each attack is a few hundred requests or a connect burst."""


def _scratch_user(cluster: Cluster) -> tuple[str, str]:
    """A user allowed to read custom metrics in namespace `scratch` only: its client
    certificate and key files, issued by the cluster CA."""
    cp = cluster.cp
    assert cp.pki is not None
    user = "scratch-reader"
    cp.request("POST", "/api/v1/namespaces", ok=(201, 409), json={"metadata": {"name": "scratch"}})
    rules = [{"apiGroups": ["custom.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list"]}]
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/scratch"
    cp.request("POST", f"{rbac}/roles", ok=(201, 409),
               json={"metadata": {"name": "metrics-reader"}, "rules": rules})  # fmt: skip
    binding = {
        "metadata": {"name": "metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "metrics-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }  # fmt: skip
    cp.request("POST", f"{rbac}/rolebindings", ok=(201, 409), json=binding)
    pair = issue(load_issued(cp.pki.ca.cert, cp.pki.ca.key), user)
    cert, key = cluster.work / f"{user}.crt", cluster.work / f"{user}.key"
    cert.write_bytes(pair.pem)
    key.write_bytes(pair.key_pem)
    return str(cert), str(key)


def routed_to(namespace: str, status: int, body: str) -> bool:
    """Whether an answer shows the request was served for `namespace`: its value, or the
    adapter's own refusal there (`... in the namespace "<namespace>"`)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    if doc.get("kind") == "MetricValueList":
        return any(i["describedObject"].get("namespace") == namespace for i in doc["items"])
    return status == 403 and f'in the namespace "{namespace}"' in str(doc.get("message", ""))


def path_confusion(cluster: Cluster, port: int, seconds: float) -> list[Goal]:
    """Issue 25's path and its variants through kube-apiserver, as a user allowed only in
    `scratch` and as the cluster admin (no SubjectAccessReview: the routing alone decides)."""
    pods = [
        *legit_pods(port),
        pod("ml", "trainer-1", f"http://127.0.0.1:{port}/pod/1"),
        pod("scratch", "a", f"http://127.0.0.1:{port}/pod/2"),
    ]
    adapter = cluster.adapter("attack-paths", pods, "--scrape-interval=2s")
    user = _scratch_user(cluster)
    paths = confused_paths("scratch", "ml", "trainer-1")
    session = cluster.session()
    stranger = requests.Session()
    stranger.trust_env = False
    stranger.cert, stranger.verify = user, session.verify
    own = f"{cluster.cp.server}{API}/namespaces/ml/pods/trainer-1/samples_per_second"
    wait_for(  # RBAC may take a moment; the user is refused in `ml` (kube-apiserver's 403)
        lambda: stranger.get(own, timeout=30).status_code == 403,
        timeout_s=60,
        what="the scratch user refused in ml",
        interval_s=1.0,
    )
    idle = observe(cluster, adapter, "idle", seconds)
    answers: dict[tuple[str, int], int] = {}  # (who, status) -> count
    routed: list[str] = []
    done = threading.Event()

    def confuse() -> None:
        for n in range(100_000):
            path = paths[n % len(paths)]
            for who, client in (("user", stranger), ("admin", session)):
                try:
                    r = client.get(cluster.cp.server + path, timeout=30, allow_redirects=False)
                except requests.RequestException:
                    answers[(who, 0)] = answers.get((who, 0), 0) + 1  # no answer
                    continue
                answers[(who, r.status_code)] = answers.get((who, r.status_code), 0) + 1
                if routed_to("ml", r.status_code, r.text):
                    routed.append(f"{who} {path} -> {r.status_code} {r.text[:120]}")
            if done.wait(0.1):
                return

    attacker = threading.Thread(target=confuse, daemon=True)
    attacker.start()
    under = observe(cluster, adapter, f"{len(paths)} confused paths, user + admin", seconds)
    done.set()
    attacker.join(60)
    sent = sum(answers.values())
    return report(
        f"path-confusion: issue 25's `a://h` path and {len(paths) - 1} variants through "
        "kube-apiserver, as a user allowed only in `scratch` and as the cluster admin, "
        f"{seconds:.0f} s",
        [idle, under],
        [
            Goal("answers routed to `ml`", f"{len(routed)} of {sent}", not routed and sent > 0),
            availability_goal(under),
            failures_goal(under),
        ],
        [
            "answers (who, status): "
            + ", ".join(f"{w} {c}: {n}" for (w, c), n in sorted(answers.items())),
            *(f"e.g. routed: {r}" for r in routed[:3]),
        ],
    )


TE_CL = tuple(
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + lengths + b"\r\n0\r\n\r\n"
    for lengths in (
        b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
    )
)
"""Chunked beside `Content-Length: 0`, both orders (issue 25: accepted before)."""


def _status_of(raw: bytes) -> tuple[int, str | None]:
    """(HTTP status, the body's `kind`) of one raw answer; (0, None) for none."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 "):
        return 0, None
    try:
        kind = json.loads(body).get("kind")
    except ValueError:
        kind = None
    return int(head[9:12]), kind


def _tls_exchange(port: int, data: bytes) -> bytes:
    """Sends `data` on a fresh TLS connection (no client certificate) and reads until the
    server closes (bounded)."""
    got = b""
    with stranger_context().wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=30)
    ) as s:
        s.sendall(data)
        for _ in range(1000):
            try:
                chunk = s.recv(65536)
            except (OSError, ssl.SSLError):
                break
            if not chunk:
                break
            got += chunk
    return got


def _log_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def framing(cluster: Cluster, port: int, seconds: float) -> list[Goal]:
    """`Transfer-Encoding: chunked` beside `Content-Length` (both orders), and a TLS
    close_notify with a half-close straight after the request, straight to the adapter."""
    adapter = cluster.adapter("attack-framing", legit_pods(port), "--scrape-interval=2s")
    idle = observe(cluster, adapter, "idle", seconds)
    log = adapter.process.log
    before = len(_log_lines(log))
    counts = {"te+cl": 0, "te+cl Status 400": 0, "close_notify": 0, "close_notify answered": 0}
    odd: list[str] = []
    done = threading.Event()

    def attack() -> None:
        for n in range(100_000):
            data = TE_CL[n % 2]
            try:
                if n % 3 == 2:  # the request, close_notify and a half-close in one send
                    # (its answer stays encrypted: after its own close_notify the client's
                    # TLS object reads nothing more; an application record is the answer)
                    healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                    raw = request_then_close_notify(adapter.port, healthz)
                    counts["close_notify"] += 1
                    counts["close_notify answered"] += raw[:1] == b"\x17"
                    if raw[:1] != b"\x17":
                        odd.append(f"close_notify: {raw[:60]!r}")
                else:
                    raw = _tls_exchange(adapter.port, data)
                    counts["te+cl"] += 1
                    if _status_of(raw) == (400, "Status"):
                        counts["te+cl Status 400"] += 1
                    else:
                        odd.append(f"te+cl: {raw[:100]!r}")
            except OSError as e:
                odd.append(repr(e)[:100])
            if done.wait(0.05):
                return

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    under = observe(cluster, adapter, "TE+CL and close_notify + half-close", seconds)
    done.set()
    attacker.join(60)
    added = _log_lines(log)[before:]
    eof = [line for line in added if "eof_received" in line]
    connections = counts["te+cl"] + counts["close_notify"]
    return report(
        "framing: `Transfer-Encoding: chunked` with `Content-Length: 0` (both orders), and a "
        "TLS close_notify + half-close right after the request, straight to the adapter, "
        f"{seconds:.0f} s",
        [idle, under],
        [
            Goal(
                "every TE+CL answer a 400 Status",
                f"{counts['te+cl Status 400']} of {counts['te+cl']}",
                counts["te+cl"] > 0 and counts["te+cl Status 400"] == counts["te+cl"],
            ),
            Goal(
                "every close_notify + half-close answered",
                f"{counts['close_notify answered']} of {counts['close_notify']}",
                counts["close_notify"] > 0
                and counts["close_notify answered"] == counts["close_notify"],
            ),
            Goal(
                "no log line per connection",
                f"{len(added)} lines in {connections} connections ({len(eof)} eof_received)",
                not eof and len(added) < max(1, connections // 10),
            ),
            availability_goal(under),
            failures_goal(under),
        ],
        [f"sent: {counts}", *(f"e.g. {o}" for o in odd[:3]), *(f"log: {x}" for x in added[:3])],
    )


def _somaxconn() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


def backlog(cluster: Cluster, port: int, seconds: float) -> list[Goal]:
    """The listen backlogs the kernel holds for the adapter and the agent's exporter (asked:
    1,024 and 512; asyncio's default of 100 once replaced them), and a burst of 1,000
    simultaneous connects to the adapter every second."""
    eport = free_port()
    proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(eport)])  # PYTHONPATH: --code
    try:
        wait_for(lambda: listening(eport), timeout_s=60, what="the exporter", interval_s=0.2)
        adapter = cluster.adapter("attack-backlog", legit_pods(port), "--scrape-interval=2s")
        cap = _somaxconn()
        held = {"adapter": listen_backlog(adapter.port), "exporter": listen_backlog(eport)}
        asked = {"adapter": 1024, "exporter": 512}
        idle = observe(cluster, adapter, "idle", seconds)
        burst = Attack("burst", adapter.port, 1000)
        try:
            under = observe(cluster, adapter, "1,000 connects at once, every second", seconds)
            counts = dict(burst.last)
        finally:
            burst.stop()
        # the handshakes in flight hold asyncio's TLS buffers; freed heap is given back
        # every 30 s (metrics_adapter/http/server.py), so RSS after is read past that
        after = observe(cluster, adapter, "after the burst", max(seconds, 35.0))
        goals = [
            Goal(
                f"{name} listen backlog the one asked for ({asked[name]}, somaxconn {cap})",
                f"{held[name]}",
                held[name] == min(asked[name], cap),
            )
            for name in ("adapter", "exporter")
        ]
        return report(
            "backlog: the listen backlogs (the kernel's, as `ss -ltn` shows them), and 1,000 "
            f"simultaneous connects to the adapter every second, {seconds:.0f} s",
            [idle, under, after],
            [*goals, availability_goal(under), failures_goal(under)],
            [
                f"burst connects: {counts.get('opened', 0)} connected, "
                f"{counts.get('slow', 0)} after a SYN retransmission (1 s or more), "
                f"{counts.get('dropped', 0)} refused, reset or not connected in 5 s"
            ],
        )
    finally:
        proc.terminate()
        proc.wait(10)


# ----------------------------------------------------------------- issue 37's floods


def chart_memory_limit() -> int:
    """The adapter's memory limit in the chart's values (bytes)."""
    values = yaml.safe_load(CHART_VALUES.read_text())
    return int(parse_quantity(values["resources"]["limits"]["memory"]))


class PeakRss:
    """The peak RSS (MB) of a process tree, read every `every` seconds while in the block."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.pid = pid
        self.every = every
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for _ in range(10_000_000):
            self.peak = max(self.peak, tree_rss_mb(self.pid))
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def peak_goal(label: str, peak_mb: float, limit: int) -> Goal:
    share = peak_mb * 1e6 / limit
    return Goal(
        f"peak RSS at most {PEAK_SHARE:.0%} of the chart's limit ({label})",
        f"{peak_mb:.0f} MB = {share:.0%} of {limit / 1e6:.0f} MB",
        share <= PEAK_SHARE,
    )


def ratio_goal(label: str, idle: Phase, under: Phase) -> Goal:
    ratio = pct(under.times, 99) / pct(idle.times, 99)
    return Goal(f"legitimate p99 within 3x idle ({label})", f"{ratio:.2f}x", ratio <= 3.0)


def pipelining(cluster: Cluster, port: int, seconds: float) -> list[Goal]:
    limit = chart_memory_limit()
    adapter = cluster.adapter(
        "attack-pipelining", legit_pods(port), "--scrape-interval=2s", f"--memory-budget={limit}"
    )
    pid = adapter.process.pid
    assert pid is not None
    idle = observe(cluster, adapter, "idle", seconds)
    phases, goals, notes = [idle], [], []
    for connections in (1, 4):
        label = f"{connections} pipelining connection{'s' * (connections > 1)}"
        with PeakRss(pid) as peak, attack("pipeline", adapter.port, connections) as held:
            under = observe(cluster, adapter, label, seconds)
            stranger = [fresh_healthz(adapter.port) for _ in range(3)]
            counts = dict(held.last)
        phases.append(under)
        goals += [
            availability_goal(under),
            failures_goal(under),
            ratio_goal(label, idle, under),
            peak_goal(label, peak.peak, limit),
        ]
        seconds_held = max(1.0, seconds)
        notes.append(
            f"{label}: {counts.get('answered', 0)} pipelined requests answered "
            f"(~{counts.get('answered', 0) / seconds_held:.0f}/s), connections re-opened "
            f"{counts.get('dropped', 0)}; a fresh stranger's GET /healthz: {stranger}; "
            f"peak RSS {peak.peak:.0f} MB"
        )
    return report(
        "pipelining: unauthenticated TLS connections straight to the adapter writing "
        f"GET /healthz 200 at a time and reading the answers, {seconds:.0f} s each; "
        f"--memory-budget {limit >> 20}Mi (the chart's limit)",
        phases,
        goals,
        notes,
    )


def memory_floods(cluster: Cluster, port: int, seconds: float) -> list[Goal]:
    limit = chart_memory_limit()
    adapter = cluster.adapter(
        "attack-memory", legit_pods(port), "--scrape-interval=2s", f"--memory-budget={limit}"
    )
    pid = adapter.process.pid
    assert pid is not None
    idle = observe(cluster, adapter, "idle", seconds)
    phases, goals, notes = [idle], [], []
    for kind, count, label in (
        ("hellos", 1500, "1,500 half-open ClientHellos from 8 addresses"),
        ("slow-body", 600, "600 slow bodies (Expect: 100-continue) from 100 addresses"),
    ):
        with PeakRss(pid) as peak, attack(kind, adapter.port, count) as held:
            under = observe(cluster, adapter, label, seconds)
            stranger = [fresh_healthz(adapter.port) for _ in range(3)]
            counts = dict(held.last)
        phases.append(under)
        goals += [  # issue 37 asks a p99 within 3x idle of the pipelining attack only
            availability_goal(under),
            failures_goal(under),
            peak_goal(label, peak.peak, limit),
        ]
        if kind == "slow-body":
            continues = counts.get("continues", 0)
            goals.append(Goal("no 100 Continue to a stranger", f"{continues}", continues == 0))
        ratio = pct(under.times, 99) / pct(idle.times, 99)
        notes.append(
            f"{label}: attacker {counts}; a fresh stranger's GET /healthz: {stranger}; "
            f"peak RSS {peak.peak:.0f} MB; legitimate p99 {ratio:.2f}x idle"
        )
    return report(
        f"memory-floods: unauthenticated floods straight to the adapter, {seconds:.0f} s each; "
        f"--memory-budget {limit >> 20}Mi (the chart's limit, {PEAK_SHARE:.0%}: "
        f"{limit * PEAK_SHARE / 1e6:.0f} MB)",
        phases,
        goals,
        notes,
    )


ATTACKS = (
    "keepalive",
    "selectors",
    "exporter",
    "hostile-target",
    "path-confusion",
    "framing",
    "backlog",
    "pipelining",
    "memory-floods",
)


def run(chosen: list[str], seconds: float, keep: int, count: int, minutes: float) -> None:
    """Runs the chosen attacks on one control plane and prints a summary of every goal."""
    work = Path(tempfile.mkdtemp(prefix="edl-bench-attacks-"))
    cluster = Cluster(work)
    goals: list[tuple[str, Goal]] = []
    started = time.monotonic()
    try:
        cluster.start()
        print(f"control plane up (kube-apiserver {cluster.cp.server}); logs in {work}/logs")
        with targets() as port:
            for name in chosen:
                t = time.monotonic()
                if name == "keepalive":
                    got = keepalive(cluster, port, seconds, keep)
                elif name == "selectors":
                    got = selectors(cluster, port, seconds, count, budget_s=1800)
                elif name == "exporter":
                    got = exporter(cluster, port, seconds)
                elif name == "path-confusion":
                    got = path_confusion(cluster, port, min(seconds, SHORT_S))
                elif name == "framing":
                    got = framing(cluster, port, min(seconds, SHORT_S))
                elif name == "backlog":
                    got = backlog(cluster, port, min(seconds, SHORT_S))
                elif name == "pipelining":
                    got = pipelining(cluster, port, seconds)
                elif name == "memory-floods":
                    got = memory_floods(cluster, port, seconds)
                else:
                    got = hostile_target(cluster, port, seconds, minutes)
                goals += [(name, g) for g in got]
                print(f"  ({name}: {time.monotonic() - t:.0f} s, load {os.getloadavg()[0]:.1f})")
    finally:
        cluster.stop()
    print(f"summary ({time.monotonic() - started:.0f} s):")
    for name, goal in goals:
        print(f"  {name:<15}{goal.line().strip()}")
