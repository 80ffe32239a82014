"""Attacks on the adapter and the agent, measured (printed, never asserted).

Runs the real `edl-adapter serve` (and the agent's exporter) of a checkout given by `--code`
(default: this one), so the same attacks can be measured before and after a change:

- `slow`: 100 TLS connections that send a ClientHello minus its last byte and 100 that send
  nothing, re-opened whenever the server drops them, held for `--seconds`; meanwhile a client
  sends the HPA's Pods query (new connection each time, as after an aggregator reconnect) and
  on one kept-alive connection. Prints p50/p99/max and failures, and the same without attack.
- `hostile`: 100 normal pods and one that invents 20,000 new label sets of a series the
  catalogue reads on every scrape (1 s interval) for `--seconds`: RSS, stored series and the
  `pods/*` latency of the normal pods.
- `selectors`: 1,000 pods with data, then `--selectors` (5,000) queries with distinct
  `metricLabelSelector`s, beside as many identical ones on a fresh adapter: RSS before, peak
  and after, side by side (issue 25's goal: under 384 MB).
- `agent`: the agent's /metrics with 200 idle connections held (scrape latency, threads), a
  burst of 300 simultaneous connects, `HEAD`, and a request after leading CRLFs.
- `keepalive`: the adapter with front-proxy (requestheader) authentication and 1,500
  unauthenticated TLS connections that each send one `GET /healthz` and then idle, re-opened
  whenever the server closes them, held for `--seconds`; the front proxy's `pods/*` query
  (its client certificate, new connection per query and one kept alive) and a kubelet-like
  `/healthz` probe, side by side with the same without attack: p50/p99, failures, RSS.
- `agent-idle`: the agent's exporter with 1,000 idle TCP connections, then 300 slowloris
  connections on top: scrapes answered, p50/p99 beside an idle baseline, RSS before/after.
- `floods`: issue 37's floods straight to the adapter (front-proxy authentication, the chart's
  memory limit as `--memory-budget`), each from a process of its own for `--seconds`:
  pipelined `GET /healthz` on 1 and on 4 TLS connections, 1,500 half-open ClientHellos from
  8 loopback addresses, 600 slow request bodies (`Expect: 100-continue`, a byte every 2 s)
  from 100: the front proxy's `pods/*` query on one kept-alive connection (as
  kube-apiserver's) p50/p99 beside the same idle, and the adapter's peak RSS (read every
  0.25 s) against the limit.

The scenarios above talk to the adapter directly. `acceptance` (the default) runs issues 25's
and 37's attacks on the adapter behind a real kube-apiserver and prints each goal, met or
missed (`bench/attacks_apiserver.py`: `--attacks keepalive,selectors,exporter,hostile-target,
path-confusion,framing,backlog,pipelining,memory-floods`, `--hostile-minutes 10`): issue 37's
are pipelined requests on 1 and 4 unauthenticated TLS connections, 1,500 half-open
ClientHellos from 8 loopback addresses and 600 slow request bodies (`Expect: 100-continue`)
from 100, each beside an idle baseline (the legitimate client's p50/p99 through
kube-apiserver), with the adapter's peak RSS against the chart's memory limit.

Run: ``.venv/bin/python bench/bench_attacks.py [--code DIR] [--seconds 60] [acceptance slow ...]``
"""

from __future__ import annotations

import argparse
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
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.net import free_port  # noqa: E402
from tests.support.pki import issue, make_ca  # noqa: E402
from tests.support.slow_clients import HalfOpenConnections, IdleKeepAlive, Slowloris  # noqa: E402

QUERY = (
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/samples_per_second"
    "?labelSelector=app%3Dtrainer"
)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def client_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# ----------------------------------------------------------------- fake agents


class _Agents(http.server.BaseHTTPRequestHandler):
    """`/pod/<i>`: a counter growing 100/s; `/hostile`: 20,000 new label sets per answer."""

    protocol_version = "HTTP/1.1"
    started = time.time()
    hostile_sets = 20_000
    serial = [0]

    def do_GET(self) -> None:
        if self.path.startswith("/hostile"):
            base = self.serial[0]
            self.serial[0] += self.hostile_sets
            lines = [
                f'edl_gpu_utilization_ratio{{gpu="{base + i}"}} 0.5\n'
                for i in range(self.hostile_sets)
            ]
            body = "".join(lines).encode()
        else:
            t = time.time() - self.started
            body = (
                f"edl_trainer_samples_total {100.0 * t:.3f}\n"
                f"edl_trainer_steps_total {t:.3f}\n"
                'edl_gpu_utilization_ratio{gpu="0"} 0.8\n'
            ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def agents() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Agents)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------- the adapter


class Adapter:
    def __init__(self, code: Path, workdir: Path, pods: list[dict[str, Any]], *extra: str) -> None:
        self.port = free_port()
        pods_file = workdir / "pods.yaml"
        pods_file.write_text(yaml.safe_dump({"pods": pods}))
        argv = [
            sys.executable,
            "-m",
            "metrics_adapter",
            "serve",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--cert-dir={workdir / 'certs'}",
            "--source=static",
            f"--static-file={pods_file}",
            "--scrape-interval=1s",
            "--authentication=none",
            "--authorization=none",
            "--log-level=warning",
            *extra,
        ]
        env = {**os.environ, "PYTHONPATH": str(code)}
        self.log = workdir / "adapter.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir
            )
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.log.read_text())
            try:
                if get(self.port, "/healthz")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("adapter did not start")

    def rss_mb(self) -> float:
        return tree_rss_mb(self.proc.pid)

    def self_metric(self, name: str) -> float:
        text = get(self.port, "/metrics")[1].decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def tree_rss_mb(pid: int) -> float:
    """RSS of a process and its children (a pre-fork server keeps the app in a child)."""
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 1e6


def get(
    port: int, path: str, timeout: float = 40.0, ctx: ssl.SSLContext | None = None, extra: str = ""
) -> tuple[int, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    tls = (ctx or client_context()).wrap_socket(sock)
    try:
        return request(tls, path, close=True, extra=extra)
    finally:
        tls.close()


def request(
    sock: socket.socket, path: str, close: bool = False, extra: str = ""
) -> tuple[int, bytes]:
    conn = "close" if close else "keep-alive"
    sent = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: {conn}\r\n{extra}\r\n"
    sock.sendall(sent.encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = None
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
        if k.strip().lower() == b"transfer-encoding":
            chunked = True
    while (length is not None and len(body) < length) or (
        chunked and not body.endswith(b"0\r\n\r\n")
    ):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(head[9:12]), body


def trainer_pods(port: int, n: int) -> list[dict[str, Any]]:
    return [
        {
            "namespace": "ml",
            "name": f"trainer-{i}",
            "labels": {"app": "trainer"},
            "deployment": "trainer",
            "url": f"http://127.0.0.1:{port}/pod/{i}",
        }
        for i in range(n)
    ]


def measure(
    port: int,
    seconds: float,
    fresh: bool,
    ctx: ssl.SSLContext | None = None,
    extra: str = "",
    path: str = QUERY,
) -> tuple[list[float], int]:
    """HPA-query latencies (ms) over `seconds`, and how many failed."""
    times: list[float] = []
    failed = 0
    end = time.monotonic() + seconds
    keep: socket.socket | None = None
    while time.monotonic() < end:
        t = time.perf_counter()
        try:
            if fresh:
                code, _ = get(port, path, ctx=ctx, extra=extra)
            else:
                if keep is None:
                    keep = (ctx or client_context()).wrap_socket(
                        socket.create_connection(("127.0.0.1", port), timeout=40)
                    )
                code, _ = request(keep, path, extra=extra)
            if code == 200:
                times.append((time.perf_counter() - t) * 1000)
            else:
                failed += 1
        except OSError:
            failed += 1
            keep = None
        time.sleep(0.05)
    return times, failed


def report(label: str, times: list[float], failed: int) -> None:
    print(
        f"  {label:<44} n={len(times):4d} failed={failed:3d} p50={pct(times, 50):8.1f} ms "
        f"p99={pct(times, 99):8.1f} ms max={max(times, default=float('nan')):8.1f} ms"
    )


# ----------------------------------------------------------------- scenarios


def slow(code: Path, seconds: float, workdir: Path) -> None:
    print(f"slow: 100 partial ClientHellos + 100 idle connects held {seconds:.0f} s")
    with agents() as port:
        adapter = Adapter(code, workdir, trainer_pods(port, 20))
        try:
            time.sleep(3)
            report("no attack, new connection per query", *measure(adapter.port, 10, True))
            with HalfOpenConnections(adapter.port, 100, 100) as holder:
                time.sleep(1.0)  # every connection open before measuring
                fresh = measure(adapter.port, seconds / 2, True)
                kept = measure(adapter.port, seconds / 2, False)
            report("under attack, new connection per query", *fresh)
            report("under attack, one kept-alive connection", *kept)
            print(f"  hostile connections dropped by the server and re-opened: {holder.dropped}")
        finally:
            adapter.stop()


def hostile(code: Path, seconds: float, workdir: Path) -> None:
    print(f"hostile: 100 pods + 1 inventing 20,000 label sets per scrape, {seconds:.0f} s")
    with agents() as port:
        pods = trainer_pods(port, 100)
        pods.append({**pods[0], "name": "hostile-0", "url": f"http://127.0.0.1:{port}/hostile"})
        adapter = Adapter(code, workdir, pods)
        try:
            time.sleep(4)
            base = measure(adapter.port, 5, True)
            rss0 = adapter.rss_mb()
            end = time.monotonic() + seconds
            peak = rss0
            while time.monotonic() < end:
                time.sleep(2)
                peak = max(peak, adapter.rss_mb())
            during = measure(adapter.port, 5, True)
            series = adapter.self_metric("edl_adapter_store_series")
            items = json.loads(get(adapter.port, QUERY)[1])["items"]
            values = {i["describedObject"]["name"]: i["value"] for i in items}
            normal = [v for k, v in values.items() if k.startswith("trainer-")]
            end_rss = adapter.rss_mb()
            print(f"  RSS {rss0:.0f} MB at start, {peak:.0f} MB peak, {end_rss:.0f} MB end")
            print(f"  stored series {series:.0f}; normal pods with a value: {len(normal)}/100")
            report("pods/* before the flood", *base)
            report("pods/* after the flood", *during)
        finally:
            adapter.stop()


def serve_filled(pods: int, port: int, workdir: str) -> None:
    """Child: the real server with `pods` pods' samples already stored."""
    from metrics_adapter.assembly import AdapterRuntime
    from metrics_adapter.http.server import AdapterServer
    from metrics_adapter.http.tls import ensure_serving_cert, server_context
    from metrics_adapter.process_memory import tune_process_memory
    from metrics_adapter.scraping.pod_registry import PodKey
    from metrics_adapter.scraping.store import Sample
    from metrics_adapter.settings import AuthMode

    try:
        from metrics_adapter.options import default_settings as settings_of
    except ImportError:  # a checkout (--code) from before the table held every default
        from metrics_adapter.settings import AdapterSettings as settings_of  # type: ignore[assignment]

    listed = [
        {"namespace": "ml", "name": f"trainer-{i}", "labels": {"app": "trainer"}}
        for i in range(pods)
    ]
    pods_file = Path(workdir) / "filled.yaml"
    pods_file.write_text(yaml.safe_dump({"pods": listed}))
    settings = settings_of(
        host="127.0.0.1",
        port=port,
        static_file=pods_file,
        stale_after=3600.0,
        expire_after=7200.0,
        authentication=AuthMode.NONE,
        authorization=AuthMode.NONE,
        log_level="warning",
    )

    def app_factory() -> Any:
        runtime = AdapterRuntime(settings)
        now = time.time()
        for r in range(8):
            t = now - (7 - r) * 5.0
            for i in range(pods):
                samples = [
                    Sample("edl_trainer_samples_total", {}, 100.0 * t, t),
                    Sample("edl_gpu_utilization_ratio", {"gpu": "0"}, 0.8, t),
                ]
                runtime.store.ingest(PodKey("ml", f"trainer-{i}"), samples)
        return runtime.app

    cert = ensure_serving_cert(None, None, Path(workdir) / "certs")
    AdapterServer(
        settings, app_factory, cert, lambda: server_context(cert, None), tune_process_memory
    ).run()


def _filled_adapter(workdir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """A `serve_filled` child (1,000 pods with data) and its port, once it answers."""
    port = free_port()
    argv = [sys.executable, __file__, "--serve-filled", str(port), str(workdir)]
    proc = subprocess.Popen(
        argv, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            get(port, "/healthz")
            return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("filled adapter did not start") from None
            time.sleep(0.3)


def selectors(code: Path, workdir: Path, count: int) -> None:
    """Distinct `metricLabelSelector`s beside as many identical queries, each on a fresh adapter.

    Each answer covers the 1,000 pods; a cache that kept every distinct one grew by ~0.4 MB a
    selector (issue 25: 111 -> 755 MB at 1,698). Printed: RSS before, peak, after (MB).
    """
    print(f"selectors: 1,000 pods, {count} queries; identical vs distinct metricLabelSelector")
    env = {**os.environ, "PYTHONPATH": f"{code}:{ROOT}"}
    path = QUERY.replace("samples_per_second", "gpu_utilization")
    rows = []
    for label, vary in (("identical", False), ("distinct", True)):
        proc, port = _filled_adapter(workdir, env)
        try:
            sock = client_context().wrap_socket(socket.create_connection(("127.0.0.1", port), 60))
            request(sock, path)
            rss0 = peak = tree_rss_mb(proc.pid)
            times = []
            failed = 0
            for i in range(count):
                selector = f"gpu%21%3Dx{i}" if vary else "gpu%21%3Dx"  # gpu!=x<i>: every pod
                t = time.perf_counter()
                status, _ = request(sock, f"{path}&metricLabelSelector={selector}")
                times.append((time.perf_counter() - t) * 1000)
                failed += status != 200
                if i % 100 == 0:
                    peak = max(peak, tree_rss_mb(proc.pid))
            after = tree_rss_mb(proc.pid)
            rows.append((label, rss0, max(peak, after), after, pct(times, 50), failed))
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"  {'queries':<10} {'RSS before':>10} {'peak':>6} {'after':>6} {'p50 ms':>7} failed")
    for label, rss0, peak, after, p50, failed in rows:
        print(f"  {label:<10} {rss0:>10.0f} {peak:>6.0f} {after:>6.0f} {p50:>7.1f} {failed}")


def agent(code: Path, workdir: Path) -> None:
    print("agent: the exporter's /metrics under idle connections, a connect burst, HEAD, CRLF")
    port = free_port()
    child = (
        "import sys,time\n"
        "from prometheus_client import CollectorRegistry, Counter\n"
        "from agent.exporter import MetricsServer\n"
        "from agent.readiness import Readiness\n"
        "r = CollectorRegistry(); Counter('edl_trainer_samples_total', 's', registry=r).inc(5)\n"
        "s = MetricsServer(r, lambda: Readiness(True, 'ok'), '127.0.0.1', int(sys.argv[1]))\n"
        "s.start(); time.sleep(3600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.Popen([sys.executable, "-c", child, str(port)], env=env, cwd=workdir)
    try:
        ps = psutil.Process(proc.pid)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

        def scrape(method: str = "GET", prefix: bytes = b"") -> tuple[float, bytes]:
            t = time.perf_counter()
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            try:
                line = f"{method} /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                s.sendall(prefix + line.encode())
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError as e:
                data = f"error {e}".encode()
            finally:
                s.close()
            return (time.perf_counter() - t) * 1000, data

        base = [scrape()[0] for _ in range(50)]
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        time.sleep(0.5)
        threads = ps.num_threads()
        held = [scrape()[0] for _ in range(50)]
        for s in idle:
            s.close()
        print(
            f"  scrape p50/p99 {pct(base, 50):.1f}/{pct(base, 99):.1f} ms alone; with 200 idle "
            f"connections {pct(held, 50):.1f}/{pct(held, 99):.1f} ms, {threads} threads"
        )
        burst_t: list[float] = []
        lock = threading.Lock()

        def one() -> None:
            t = time.perf_counter()
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                s.close()
                with lock:
                    burst_t.append((time.perf_counter() - t) * 1000)
            except OSError:
                pass

        workers = [threading.Thread(target=one) for _ in range(300)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        print(
            f"  300 simultaneous connects: {len(burst_t)} ok, connect p50/max "
            f"{pct(burst_t, 50):.1f}/{max(burst_t, default=0):.0f} ms"
        )
        head = scrape("HEAD")[1][:12]
        crlf = scrape(prefix=b"\r\n\r\n")[1][:12]
        print(f"  HEAD /metrics -> {head!r}; after 2 CRLFs -> {crlf!r}")
    finally:
        proc.terminate()
        proc.wait(10)


def front_proxy(workdir: Path) -> tuple[ssl.SSLContext, Path]:
    """A front-proxy CA file for the adapter and a client context with its certificate."""
    from cryptography.hazmat.primitives.serialization import Encoding

    ca = make_ca("front-proxy-ca")
    ca_file = workdir / "front-proxy-ca.crt"
    ca_file.write_bytes(ca.cert.public_bytes(Encoding.PEM))
    pair = issue(ca, "front-proxy-client")
    cert, key = workdir / "proxy.crt", workdir / "proxy.key"
    cert.write_bytes(pair.pem)
    key.write_bytes(pair.key_pem)
    ctx = client_context()
    ctx.load_cert_chain(str(cert), str(key))
    return ctx, ca_file


def keepalive(code: Path, seconds: float, workdir: Path, count: int) -> None:
    print(
        f"keepalive: {count} unauthenticated TLS connections, one GET /healthz each then idle, "
        f"re-opened when closed, {seconds:.0f} s"
    )
    proxy, ca_file = front_proxy(workdir)
    user = "X-Remote-User: system:serviceaccount:kube-system:horizontal-pod-autoscaler\r\n"
    with agents() as port:
        adapter = Adapter(
            code,
            workdir,
            trainer_pods(port, 20),
            "--authentication=delegated",
            "--authentication-skip-lookup",
            f"--requestheader-client-ca-file={ca_file}",
            "--requestheader-allowed-names=front-proxy-client",
        )
        try:
            time.sleep(3)
            rss0 = adapter.rss_mb()
            base_new = measure(adapter.port, 10, True, proxy, user)
            base_kept = measure(adapter.port, 10, False, proxy, user)
            base_probe = measure(adapter.port, 5, True, path="/healthz")
            with IdleKeepAlive(adapter.port, count, client_context()) as strangers:
                deadline = time.monotonic() + 120
                while strangers.opened < count and time.monotonic() < deadline:
                    time.sleep(0.5)
                rss_held = adapter.rss_mb()
                new = measure(adapter.port, seconds / 2, True, proxy, user)
                kept = measure(adapter.port, seconds / 2, False, proxy, user)
                probe = measure(adapter.port, 5, True, path="/healthz")
                rss1 = adapter.rss_mb()
            report("front proxy, no attack, new connection", *base_new)
            report("front proxy, under attack, new connection", *new)
            report("front proxy, no attack, kept-alive", *base_kept)
            report("front proxy, under attack, kept-alive", *kept)
            report("/healthz probe, no attack", *base_probe)
            report("/healthz probe, under attack", *probe)
            print(
                f"  strangers connected {strangers.opened} times, closed by the server "
                f"{strangers.dropped} times; RSS {rss0:.0f} MB before, {rss_held:.0f} MB with "
                f"all held, {rss1:.0f} MB at the end"
            )
        finally:
            adapter.stop()


def agent_idle(code: Path, workdir: Path, seconds: float) -> None:
    print("agent-idle: the exporter's /metrics with 1,000 idle connections, then +300 slowloris")
    port = free_port()
    child = (
        "import sys,time\n"
        "from prometheus_client import CollectorRegistry, Counter\n"
        "from agent.exporter import MetricsServer\n"
        "from agent.readiness import Readiness\n"
        "r = CollectorRegistry(); Counter('edl_trainer_samples_total', 's', registry=r).inc(5)\n"
        "s = MetricsServer(r, lambda: Readiness(True, 'ok'), '127.0.0.1', int(sys.argv[1]))\n"
        "s.start(); time.sleep(3600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.Popen([sys.executable, "-c", child, str(port)], env=env, cwd=workdir)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

        def scrapes(duration: float) -> tuple[list[float], int]:
            times: list[float] = []
            failed = 0
            end = time.monotonic() + duration
            while time.monotonic() < end:
                t = time.perf_counter()
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=30)
                    try:
                        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        data = b""
                        while chunk := s.recv(65536):
                            data += chunk
                    finally:
                        s.close()
                    if data.startswith(b"HTTP/1.1 200") and b"edl_trainer_samples" in data:
                        times.append((time.perf_counter() - t) * 1000)
                    else:
                        failed += 1
                except OSError:
                    failed += 1
                time.sleep(0.2)
            return times, failed

        rss0 = tree_rss_mb(proc.pid)
        base = scrapes(seconds / 3)
        with HalfOpenConnections(port, partial=0, idle=1000) as idle:
            deadline = time.monotonic() + 120
            while len(idle.socks) < 1000 and time.monotonic() < deadline:
                time.sleep(0.5)
            rss_idle = tree_rss_mb(proc.pid)
            held = scrapes(seconds / 3)
            with Slowloris(port, 300) as slow:
                loris = scrapes(seconds / 3)
            rss1 = tree_rss_mb(proc.pid)
        for label, (times, failed) in (
            ("scrapes, no attack", base),
            ("scrapes, 1,000 idle connections", held),
            ("scrapes, 1,000 idle + 300 slowloris", loris),
        ):
            report(f"{label} ({len(times)}/{len(times) + failed} answered)", times, failed)
        print(
            f"  idle connections closed by the server {idle.dropped}, slowloris {slow.dropped}; "
            f"RSS {rss0:.0f} MB before, {rss_idle:.0f} MB with 1,000 idle, {rss1:.0f} MB at the end"
        )
    finally:
        proc.terminate()
        proc.wait(10)


def floods(code: Path, seconds: float, workdir: Path) -> None:
    from bench.attacks_apiserver import PEAK_SHARE, Attack, PeakRss, chart_memory_limit

    limit = chart_memory_limit()
    # a checkout from before issue 37 (--code) has no budget: its adapter runs without one
    budget = [f"--memory-budget={limit}"] if (code / "edl_common/http/memory.py").exists() else []
    print(
        f"floods: issue 37's, straight to the adapter ({budget[0] if budget else 'no budget'}; "
        f"the chart's limit {limit >> 20}Mi, {PEAK_SHARE:.0%} of it: "
        f"{limit * PEAK_SHARE / 1e6:.0f} MB), {seconds:.0f} s each"
    )
    proxy, ca_file = front_proxy(workdir)
    user = "X-Remote-User: system:serviceaccount:kube-system:horizontal-pod-autoscaler\r\n"
    attacks = [
        ("pipeline", 1, "1 connection pipelining GET /healthz"),
        ("pipeline", 4, "4 connections pipelining GET /healthz"),
        ("hellos", 1500, "1,500 half-open ClientHellos, 8 addresses"),
        ("slow-body", 600, "600 slow bodies (100-continue), 100 addresses"),
    ]
    rows = []
    with agents() as port:
        for kind, count, label in attacks:
            adapter = Adapter(
                code,
                workdir,
                trainer_pods(port, 10),
                "--authentication=delegated",
                "--authentication-skip-lookup",
                f"--requestheader-client-ca-file={ca_file}",
                "--requestheader-allowed-names=front-proxy-client",
                *budget,
            )
            try:
                time.sleep(3)
                idle = measure(adapter.port, seconds / 2, False, proxy, user)
                rss_idle = adapter.rss_mb()
                held = Attack(kind, adapter.port, count)
                try:
                    held.wait_opened()
                    with PeakRss(adapter.proc.pid) as peak:
                        under = measure(adapter.port, seconds, False, proxy, user)
                    counts = dict(held.last)
                finally:
                    held.stop()
            finally:
                adapter.stop()
            rows.append((label, idle, under, rss_idle, peak.peak, counts))
    print(
        f"  {'attack':<46} {'idle p50/p99 ms':>16} {'under p50/p99 ms':>17} {'p99 x':>6} "
        f"{'failed':>6} {'RSS idle/peak MB':>17} {'% of limit':>10}"
    )
    for label, (t0, f0), (t1, f1), rss0, rss_peak, counts in rows:
        ratio = pct(t1, 99) / pct(t0, 99)
        print(
            f"  {label:<46} {pct(t0, 50):7.1f}/{pct(t0, 99):<8.1f} {pct(t1, 50):8.1f}/"
            f"{pct(t1, 99):<8.1f} {ratio:6.2f} {f0 + f1:6d} {rss0:8.0f}/{rss_peak:<8.0f} "
            f"{rss_peak * 1e6 / limit:9.0%}"
        )
        print(f"      attacker: {counts}")


def acceptance(args: argparse.Namespace) -> None:
    """Issue 25's attacks through kube-apiserver; the adapter and exporter from `--code`."""
    from bench import attacks_apiserver

    chosen = [a for a in args.attacks.split(",") if a]
    unknown = sorted(set(chosen) - set(attacks_apiserver.ATTACKS))
    if unknown:
        raise SystemExit(f"bench_attacks: unknown attacks {unknown} ({attacks_apiserver.ATTACKS})")
    os.environ["PYTHONPATH"] = str(args.code)  # what the adapter and the exporter import
    seconds = min(args.seconds, 60.0)
    attacks_apiserver.run(chosen, seconds, args.keepalive, args.selectors, args.hostile_minutes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "scenarios",
        nargs="*",
        default="acceptance",  # a string: argparse checks a '*' default against the choices
        choices=[
            "acceptance",
            "slow",
            "hostile",
            "selectors",
            "agent",
            "keepalive",
            "agent-idle",
            "floods",
        ],
    )
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--selectors", type=int, default=5000)
    parser.add_argument("--keepalive", type=int, default=1500)
    parser.add_argument("--serve-filled", nargs=2)
    parser.add_argument(
        "--attacks",
        default=(
            "keepalive,selectors,exporter,hostile-target,path-confusion,framing,backlog,"
            "pipelining,memory-floods"
        ),
        help="acceptance: which attacks, comma-separated",
    )
    parser.add_argument(
        "--hostile-minutes", type=float, default=10.0, help="acceptance: hostile-target length"
    )
    args = parser.parse_args()
    if args.serve_filled:
        serve_filled(1000, int(args.serve_filled[0]), args.serve_filled[1])
        return
    random.seed(14)
    print(f"bench_attacks: code {args.code}, {os.cpu_count()} CPUs")
    runs: dict[str, Callable[[Path], None]] = {
        "acceptance": lambda w: acceptance(args),
        "slow": lambda w: slow(args.code, args.seconds, w),
        "hostile": lambda w: hostile(args.code, args.seconds, w),
        "selectors": lambda w: selectors(args.code, w, args.selectors),
        "agent": lambda w: agent(args.code, w),
        "keepalive": lambda w: keepalive(args.code, args.seconds, w, args.keepalive),
        "agent-idle": lambda w: agent_idle(args.code, w, args.seconds),
        "floods": lambda w: floods(args.code, args.seconds, w),
    }
    scenarios = [args.scenarios] if isinstance(args.scenarios, str) else args.scenarios
    for name in scenarios:
        with tempfile.TemporaryDirectory(prefix=f"edl-bench-{name}-") as tmp:
            runs[name](Path(tmp))
    print(f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
