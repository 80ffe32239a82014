"""Benchmark of the metrics adapter (printed, never asserted).

For 100, 1,000 and 10,000 pods in the store it starts the real server (one process: the asyncio
front end and the app's threads, the production code path; plain HTTP and TLS), then measures
over real HTTP:

- latency p50/p99 and requests/s of the HPA's query
  ``/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/samples_per_second?labelSelector=...``
  (every pod matches, so the answer has one item per pod), one keep-alive client;
- requests/s with 4 concurrent clients (the server is one process: one core at most);
- the RSS of the serving process;
- scrape-to-visible freshness: a real endpoint's gauge changes, how long until the API shows it.

Goals (from the issue): p99 < 5 ms at 1,000 pods, >= 2,000 req/s on one core, < 150 MB RSS at
10,000 pods. Run: ``.venv/bin/python bench/bench_adapter.py [--sizes 100,1000,10000]``.

``--against REV`` compares this tree's server with git revision ``REV``'s instead (both
running side by side, every query alternating between them), so a change's cost is a ratio
measured under the same load: ``bench/bench_adapter.py --against 5578ab6 --sizes 1000,10000``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

CM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml"
QUERY = f"{CM}/pods/*/samples_per_second?labelSelector=app%3Dtrainer"
QUERIES = {
    "pods/*": QUERY,  # the HPA's Pods-metric read: one item per pod
    "deploy": f"{CM}/deployments.apps/trainer/samples_per_second",  # Object: all pods, 1 item
    "pod": f"{CM}/pods/trainer-0/samples_per_second",  # one named pod
}
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- child: a filled adapter


def serve_filled(pods: int, port: int, tls: bool, workdir: Path, threads_only: bool) -> None:
    """Run the real server with `pods` trainer pods' samples already in its store
    (``threads_only``: every request handed to an app thread, as before the event loop
    answered them itself)."""
    from metrics_adapter.assembly import AdapterRuntime
    from metrics_adapter.http.server import AdapterServer
    from metrics_adapter.http.tls import ensure_serving_cert, server_context
    from metrics_adapter.options import default_settings
    from metrics_adapter.process_memory import tune_process_memory
    from metrics_adapter.scraping.store import Sample
    from metrics_adapter.settings import AuthMode

    pods_file = workdir / f"pods-{pods}.yaml"
    listed = [
        {
            "namespace": "ml",
            "name": f"trainer-{i}",
            "labels": {"app": "trainer"},
            "deployment": "trainer",
        }
        for i in range(pods)
    ]
    pods_file.write_text(yaml.safe_dump({"pods": listed}))
    settings = default_settings(
        host="127.0.0.1",
        port=port,
        tls=tls,
        static_file=pods_file,
        scrape_interval=5.0,
        stale_after=3600.0,
        expire_after=7200.0,
        authentication=AuthMode.NONE,
        authorization=AuthMode.NONE,
        threads=8,
        log_level="warning",
    )

    def app_factory() -> Any:
        runtime = AdapterRuntime(settings)
        now = time.time()
        rounds = runtime.store._capacity  # steady state: every window full
        for r in range(rounds):
            t = now - (rounds - 1 - r) * settings.scrape_interval
            for i in range(pods):
                steps = 10.0 * t
                samples = [
                    Sample("edl_trainer_samples_total", {}, 320.0 * t + i, t),
                    Sample("edl_trainer_steps_total", {}, steps, t),
                    Sample("edl_trainer_step_duration_seconds_sum", {}, steps * 0.1, t),
                    Sample("edl_trainer_step_duration_seconds_count", {}, steps, t),
                    Sample("edl_trainer_comm_seconds_total", {}, steps * 0.02, t),
                    Sample("edl_trainer_process_cpu_seconds_total", {}, t, t),
                    Sample("edl_gpu_utilization_ratio", {"gpu": "0"}, 0.8, t),
                ]
                runtime.store.ingest(listed_key(runtime, i), samples)
        runtime.start()
        if threads_only:
            from metrics_adapter.api.flask_app import INLINE_EXTENSION

            runtime.app.extensions.pop(INLINE_EXTENSION)
        return runtime.app

    def listed_key(runtime: Any, i: int) -> Any:
        from metrics_adapter.scraping.pod_registry import PodKey

        return PodKey("ml", f"trainer-{i}")

    cert = context_factory = None
    if tls:
        cert = ensure_serving_cert(None, None, workdir / "certs")
        context_factory = lambda: server_context(cert, None)  # noqa: E731
    AdapterServer(settings, app_factory, cert, context_factory, tune_process_memory).run()


def serve_hello(port: int, inline: bool) -> None:
    """The same server serving a one-line Flask app: the stack's own ceiling (``inline``:
    answered on the event loop, as the adapter's own app is)."""
    from flask import Flask

    from metrics_adapter.api.flask_app import INLINE_EXTENSION
    from metrics_adapter.http.server import AdapterServer
    from metrics_adapter.options import default_settings
    from metrics_adapter.process_memory import tune_process_memory

    def app_factory() -> Any:
        app = Flask("hello")
        app.add_url_rule("/", "hello", lambda: "ok")
        if inline:
            app.extensions[INLINE_EXTENSION] = True
        return app

    settings = default_settings(host="127.0.0.1", port=port, tls=False, log_level="warning")
    AdapterServer(settings, app_factory, None, None, tune_process_memory).run()


def bench_hello(seconds: float, inline: bool) -> tuple[float, float, float]:
    port = free_port()
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve-hello",
            "--port",
            str(port),
            *(["--inline"] if inline else []),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                RawClient(port, False).get("/")
                break
            except OSError:
                time.sleep(0.2)
        times, rate = latency(port, False, seconds, 50000, "/")
        return percentile(times, 50) * 1000, percentile(times, 99) * 1000, rate
    finally:
        child.terminate()
        child.wait(15)


# ---------------------------------------------------------------- parent: measurements


def connect(port: int, tls: bool) -> http.client.HTTPConnection:
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx)
    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)


class RawClient:
    """A minimal keep-alive HTTP/1.1 client on a raw socket (so the client's own CPU cost
    does not cap the measured rate as much as http.client's does)."""

    def __init__(self, port: int, tls: bool, context: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        if tls:
            ctx = context
            if ctx is None:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise OSError("connection closed")
        self.buf += chunk

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def get(self, path: str) -> bytes:
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1]
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")[1:])
        }
        if headers.get(b"transfer-encoding") == b"chunked":
            parts = []
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    self._line()
                    break
                parts.append(self._take(size))
                self._line()
            body = b"".join(parts)
        else:
            body = self._take(int(headers.get(b"content-length", b"0")))
        if status != b"200":
            raise RuntimeError(f"{path}: HTTP {status!r}")
        return body

    def close(self) -> None:
        self.sock.close()


def get(conn: http.client.HTTPConnection, path: str) -> bytes:
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {body[:200]!r}")
    return body


def wait_ready(port: int, tls: bool, pods: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = connect(port, tls)
            items = json.loads(get(conn, QUERY))["items"]
            conn.close()
            if len(items) == pods:
                return
        except (OSError, RuntimeError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"adapter with {pods} pods not ready in {timeout}s")


def latency(
    port: int, tls: bool, seconds: float, max_requests: int, query: str = QUERY
) -> tuple[list[float], float]:
    conn = RawClient(port, tls)
    conn.get(query)  # warm up the connection and the memo
    times: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and len(times) < max_requests:
        t0 = time.perf_counter()
        conn.get(query)
        times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    conn.close()
    return times, len(times) / elapsed


def concurrent_rate(
    port: int, tls: bool, clients: int, seconds: float, query: str = QUERY
) -> float:
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        conn = RawClient(port, tls)
        while time.perf_counter() < stop:
            conn.get(query)
            counts[k] += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    return sum(counts) / seconds


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def server_rss(pid: int) -> float:
    """RSS of the serving process (one process: the app lives in it, no pre-fork workers)."""
    proc = psutil.Process(pid)
    workers = proc.children() or [proc]
    return sum(p.memory_info().rss for p in workers) / 2**20


def start_filled(
    pods: int,
    port: int,
    tls: bool,
    workdir: Path,
    threads_only: bool = False,
    tree: Path = ROOT,
) -> subprocess.Popen[bytes]:
    """The real server with ``pods`` pods' samples in its store, as a child process
    (``tree``: the source tree whose server runs, e.g. an older revision for ``--against``)."""
    return subprocess.Popen(
        [
            sys.executable,
            str(tree / "bench" / "bench_adapter.py"),
            "--serve",
            str(pods),
            "--port",
            str(port),
            "--workdir",
            str(workdir),
            *(["--tls"] if tls else []),
            *(["--threads-only"] if threads_only else []),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_servers(servers: dict[str, tuple[subprocess.Popen[bytes], int]]) -> None:
    for child, _ in servers.values():
        child.terminate()
        child.wait(15)


def front_ab(pods: int, workdir: Path, rounds: int, seconds: float) -> None:
    """The one-pod query with one keep-alive client, answered on the event loop vs handed to
    an app thread, two servers side by side, alternating (A/B) for ``rounds`` rounds."""
    servers = {}
    for mode, threads_only in (("loop", False), ("thread", True)):
        port = free_port()
        servers[mode] = (start_filled(pods, port, False, workdir, threads_only), port)
    try:
        for _, port in servers.values():
            wait_ready(port, False, pods)
        for rnd in range(rounds):
            for mode, (_, port) in servers.items():
                times, rate = latency(port, False, seconds, 50000, QUERIES["pod"])
                print(
                    f"front A/B round {rnd + 1}: one pod answered on the {mode:<6} "
                    f"p50 {percentile(times, 50) * 1000:.2f} ms, "
                    f"p99 {percentile(times, 99) * 1000:.2f} ms, {rate:.0f} req/s "
                    f"(load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    finally:
        stop_servers(servers)


def export_revision(rev: str, into: Path) -> Path:
    """The source tree of git revision ``rev`` (``git archive``), for ``--against``."""
    tree = into / f"rev-{rev.replace('/', '_')}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def against(rev: str, sizes: list[int], rounds: int, seconds: float, workdir: Path) -> None:
    """This tree's server and ``rev``'s side by side, each query alternating A/B for
    ``rounds`` rounds, so both see the same machine load; prints both and their ratio."""
    old_tree = export_revision(rev, workdir)
    print(f"A/B: this tree against {rev}, {rounds} alternating rounds of {seconds:.0f} s each")
    print(
        f"{'pods':>6} {'query':>7} {'mode':>5} {'p50 new':>8} {'p50 old':>8} {'x':>5} "
        f"{'p99 new':>8} {'p99 old':>8} {'x':>5} {'req/s new':>9} {'req/s old':>9} {'x':>5}"
    )
    for pods in sizes:
        for tls in (False, True):
            servers = {}
            for side, tree in (("new", ROOT), ("old", old_tree)):
                port = free_port()
                servers[side] = (start_filled(pods, port, tls, workdir, tree=tree), port)
            try:
                for _, port in servers.values():
                    wait_ready(port, tls, pods)
                for name, query in QUERIES.items():
                    times: dict[str, list[float]] = {"new": [], "old": []}
                    counts = {"new": 0.0, "old": 0.0}
                    for _ in range(rounds):
                        for side, (_, port) in servers.items():
                            got, rate = latency(port, tls, seconds, 20000, query)
                            times[side] += got
                            counts[side] += rate / rounds
                    p50 = {k: percentile(v, 50) * 1000 for k, v in times.items()}
                    p99 = {k: percentile(v, 99) * 1000 for k, v in times.items()}
                    print(
                        f"{pods:>6} {name:>7} {'https' if tls else 'http':>5} "
                        f"{p50['new']:>8.2f} {p50['old']:>8.2f} {p50['new'] / p50['old']:>5.2f} "
                        f"{p99['new']:>8.2f} {p99['old']:>8.2f} {p99['new'] / p99['old']:>5.2f} "
                        f"{counts['new']:>9.0f} {counts['old']:>9.0f} "
                        f"{counts['new'] / counts['old']:>5.2f}",
                        flush=True,
                    )
            finally:
                stop_servers(servers)


def bench_size(pods: int, tls: bool, workdir: Path) -> list[dict[str, Any]]:
    port = free_port()
    child = start_filled(pods, port, tls, workdir)
    try:
        wait_ready(port, tls, pods)
        rss_ready = server_rss(child.pid)
        seconds = 4.0 if pods <= 1000 else 8.0
        rows = []
        for name, query in QUERIES.items():
            times, rate = latency(port, tls, seconds, 20000, query)
            conc = concurrent_rate(port, tls, 4, seconds, query)
            body = len(get(connect(port, tls), query))
            rows.append(
                {
                    "pods": pods,
                    "query": name,
                    "p50_ms": percentile(times, 50) * 1000,
                    "p99_ms": percentile(times, 99) * 1000,
                    "req_s": rate,
                    "req_s_4clients": conc,
                    "body_kb": body / 1024,
                }
            )
        rss_load = server_rss(child.pid)
        for row in rows:
            row.update(rss_ready_mb=rss_ready, rss_mb=rss_load)
        return rows
    finally:
        child.terminate()
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


FRESHNESS_AGENT = r"""
import sys, time
from prometheus_client import CollectorRegistry, Gauge, start_http_server
r = CollectorRegistry()
g = Gauge("edl_gpu_utilization_ratio", "u", ["gpu"], registry=r)
g.labels("0").set(0.0)
start_http_server(int(sys.argv[1]), addr="127.0.0.1", registry=r)
for line in sys.stdin:  # each line: a new value, acknowledged with the time it was set
    g.labels("0").set(float(line))
    print(time.time(), flush=True)
"""


def freshness(workdir: Path, interval: str, changes: int) -> list[float]:
    agent_port, port = free_port(), free_port()
    agent = subprocess.Popen(
        [sys.executable, "-c", FRESHNESS_AGENT, str(agent_port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pods_file = workdir / "fresh-pods.yaml"
    pods_file.write_text(
        yaml.safe_dump(
            {
                "pods": [
                    {
                        "namespace": "ml",
                        "name": "trainer-0",
                        "labels": {"app": "trainer"},
                        "address": f"127.0.0.1:{agent_port}",
                    }
                ]
            }
        )
    )
    adapter = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "edl-adapter"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-tls",
            "--static-file",
            str(pods_file),
            "--scrape-interval",
            interval,
            "--authentication",
            "none",
            "--authorization",
            "none",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/trainer-0/gpu_utilization"
    delays: list[float] = []
    try:
        time.sleep(1.0)
        conn = None
        for k in range(1, changes + 1):
            target = k / (changes + 1)
            time.sleep(random.uniform(0.0, 1.0))  # de-correlate changes from the scrape phase
            assert agent.stdin is not None and agent.stdout is not None
            agent.stdin.write(f"{target}\n")
            agent.stdin.flush()
            set_at = float(agent.stdout.readline())
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    conn = conn or connect(port, False)
                    body = json.loads(get(conn, path))
                    seen = body["items"][0]["value"]
                    from edl_common.quantity import parse_quantity

                    if abs(float(parse_quantity(seen)) - target) < 1e-3:
                        delays.append(time.time() - set_at)
                        break
                except (
                    OSError,
                    RuntimeError,
                    KeyError,
                    IndexError,
                    ValueError,
                    http.client.HTTPException,
                ):
                    conn = None
                time.sleep(0.005)
    finally:
        adapter.terminate()
        agent.terminate()
        adapter.wait(15)
        agent.wait(15)
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--tls", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-hello", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-tls-runs", action="store_true", help="skip the TLS measurements")
    parser.add_argument(
        "--front-ab",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="only compare answering on the event loop with handing to a thread (1,000 pods)",
    )
    parser.add_argument("--threads-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--against",
        metavar="REV",
        help="only compare this tree's server with git revision REV's, alternating (A/B)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds for --against")
    args = parser.parse_args()
    if args.serve_hello:
        serve_hello(args.port, args.inline)
        return
    if args.serve is not None:
        serve_filled(args.serve, args.port, args.tls, Path(args.workdir), args.threads_only)
        return
    if args.front_ab:
        with tempfile.TemporaryDirectory(prefix="bench-adapter-") as tmp:
            front_ab(1000, Path(tmp), args.front_ab, 4.0)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.against:
        with tempfile.TemporaryDirectory(prefix="bench-adapter-") as tmp:
            against(args.against, sizes, args.rounds, 2.0, Path(tmp))
        return
    print(f"bench_adapter: {os.cpu_count()} CPUs visible; server = 1 process, 8 app threads")
    print(f"query: GET {QUERY}")
    header = (
        f"{'pods':>6} {'query':>7} {'mode':>5} {'p50 ms':>7} {'p99 ms':>7} {'req/s':>7} "
        f"{'req/s x4':>8} {'RSS MB':>7} {'RSS@load':>8} {'body KB':>8}"
    )
    print(header)
    for inline, where in ((False, "on an app thread"), (True, "on the event loop")):
        p50, p99, rate = bench_hello(4.0, inline)
        print(
            f"{'-':>6} {'hello':>7} {'http':>5} {p50:>7.2f} {p99:>7.2f} {rate:>7.0f}   "
            f"(same server + Flask serving 'ok' {where}: the stack's ceiling here)"
        )
    with tempfile.TemporaryDirectory(prefix="bench-adapter-") as tmp:
        workdir = Path(tmp)
        for pods in sizes:
            for tls in [False] if args.no_tls_runs else [False, True]:
                for r in bench_size(pods, tls, workdir):
                    mode = "https" if tls else "http"
                    print(
                        f"{pods:>6} {r['query']:>7} {mode:>5} {r['p50_ms']:>7.2f} "
                        f"{r['p99_ms']:>7.2f} {r['req_s']:>7.0f} {r['req_s_4clients']:>8.0f} "
                        f"{r['rss_ready_mb']:>7.1f} {r['rss_mb']:>8.1f} {r['body_kb']:>8.1f}",
                        flush=True,
                    )
        for interval in ("1s", "250ms"):
            delays = freshness(workdir, interval, 10)
            if delays:
                mean, p50 = statistics.mean(delays) * 1000, statistics.median(delays) * 1000
                print(
                    f"freshness (scrape interval {interval}): gauge change -> visible in the API: "
                    f"mean {mean:.0f} ms, p50 {p50:.0f} ms, max {max(delays) * 1000:.0f} ms "
                    f"over {len(delays)} changes"
                )
            else:
                print(f"freshness (scrape interval {interval}): no change became visible")


if __name__ == "__main__":
    main()
