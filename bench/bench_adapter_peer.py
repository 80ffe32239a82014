"""EDL's adapter and prometheus-adapter side by side on one cluster, in one run (printed only).

The cluster is the e2e harness's real etcd + kube-apiserver (aggregation layer) +
kube-controller-manager on 127.0.0.1. A Deployment `ml/trainer` of `--pods` (1,000) replicas is
created; the ReplicaSet controller makes the pods, which are then marked Running with a distinct
loopback pod IP each. One process (the "fleet") serves a trainer exposition on every pod IP at
:9400 (counters growing at a per-pod rate, so the rates are real; one GPU gauge per pod). Then:

- EDL's adapter: `edl-adapter serve --source kubernetes` (watches the pods, scrapes the fleet);
- the peer: prometheus-adapter v0.12.0, built from the Go module proxy by bench/peer/build.sh
  (cached in ~/.cache/edl/prometheus-adapter/<version>), with
  manifests/overlays/prometheus-adapter/rules.yaml, over a real Prometheus (Debian package)
  scraping the same fleet with the labels a pod relabelling gives (namespace, pod, app,
  deployment). Both scrape every `--scrape-interval`; both use delegated authn/authz.

Each query (pods/* over 10, 100 and 1,000 pods, one named pod, the Object metric on the
Deployment) is measured against each adapter's own TLS port (client certificate of the
cluster admin) and through kube-apiserver (the v1beta2 APIService is pointed at one adapter,
then the other), A/B/A/B for `--rounds` rounds: p50/p99 with one keep-alive client, req/s with
`--concurrency` clients, CPU time per request of the adapter (its idle rate subtracted) and of
everything the request used (adapter + Prometheus + kube-apiserver), RSS, and freshness (a
pod's GPU gauge changes in the fleet: time until each adapter's API shows it). Medians over the
rounds; ratios are EDL / peer (< 1: EDL takes less time, memory or CPU; > 1: more req/s).

Run: ``.venv/bin/python bench/bench_adapter_peer.py [--pods 1000] [--rounds 2]``
(about 10 minutes; the first run builds prometheus-adapter, about 6 minutes more).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import random
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_adapter import RawClient, percentile  # noqa: E402
from tests.e2e.harness.adapter import AdapterSettings, MetricsAdapter  # noqa: E402
from tests.e2e.harness.controlplane import (  # noqa: E402
    ADAPTER_SERVICE,
    ADAPTER_SERVICE_NAMESPACE,
    ControlPlane,
    ControlPlaneSettings,
    ensure_binaries,
)
from tests.e2e.harness.processes import HarnessError, ManagedProcess, free_port  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

PEER_BUILD = ROOT / "bench" / "peer" / "build.sh"
PEER_RULES = ROOT / "manifests" / "overlays" / "prometheus-adapter" / "rules.yaml"
NS = "ml"
CM = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}"
APISERVICE = "v1beta2.custom.metrics.k8s.io"
SLICES = {"s10": 10, "s100": 90}  # label bench-slice: the first 10 pods, the next 90, "rest"


def queries(pods: int) -> dict[str, str]:
    """Name -> path (v1beta2) of every query measured; the first pod is `pod`."""
    m = "samples_per_second"
    q = {
        "pods/* 10": f"{CM}/pods/*/{m}?labelSelector=bench-slice%3Ds10",
        "pods/* 100": f"{CM}/pods/*/{m}?labelSelector=bench-slice+in+%28s10%2Cs100%29",
        f"pods/* {pods}": f"{CM}/pods/*/{m}?labelSelector=app%3Dtrainer",
        "one pod": f"{CM}/pods/{{pod}}/{m}",
        "Object": f"{CM}/deployments.apps/trainer/{m}",
    }
    return q if pods > 100 else {k: v for k, v in q.items() if k != "pods/* 100"}


# ---------------------------------------------------------------- the fleet (child process)


def _exposition(rate: float, gpu: float, now: float) -> bytes:
    samples = rate * now
    steps = samples / 32.0
    return (
        "# TYPE edl_trainer_samples_total counter\n"
        f"edl_trainer_samples_total {samples:.3f}\n"
        "# TYPE edl_trainer_steps_total counter\n"
        f"edl_trainer_steps_total {steps:.3f}\n"
        "# TYPE edl_trainer_step_duration_seconds histogram\n"
        f'edl_trainer_step_duration_seconds_bucket{{le="+Inf"}} {steps:.3f}\n'
        f"edl_trainer_step_duration_seconds_sum {steps * 0.1:.3f}\n"
        f"edl_trainer_step_duration_seconds_count {steps:.3f}\n"
        "# TYPE edl_trainer_comm_seconds_total counter\n"
        f"edl_trainer_comm_seconds_total {steps * 0.025:.3f}\n"
        "# TYPE edl_trainer_process_cpu_seconds_total counter\n"
        f"edl_trainer_process_cpu_seconds_total {now * 0.5:.3f}\n"
        "# TYPE edl_gpu_utilization_ratio gauge\n"
        f'edl_gpu_utilization_ratio{{gpu="0"}} {gpu}\n'
    ).encode()


def serve_fleet(spec_file: Path, control_port: int) -> None:
    """Serves every pod's exposition on its pod IP:9400 (one event loop, many sockets), and on
    127.0.0.1:`control_port` `GET /set?ip=<pod ip>&gpu=<value>`, answered once the new value
    is served, with the time it was set."""
    spec: dict[str, float] = json.loads(spec_file.read_text())  # pod ip -> samples/s
    gpu = dict.fromkeys(spec, 0.5)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ip: str) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                if ip == "control":
                    from urllib.parse import parse_qs, urlsplit

                    args = parse_qs(urlsplit(target).query)
                    gpu[args["ip"][0]] = float(args["gpu"][0])
                    body = f"{time.time()}\n".encode()
                else:
                    body = _exposition(spec[ip], gpu[ip], time.time())
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def handler(ip: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        return lambda r, w: handle(r, w, ip)

    async def main() -> None:
        servers = []
        for ip in spec:
            servers.append(await asyncio.start_server(handler(ip), ip, 9400))
        servers.append(await asyncio.start_server(handler("control"), "127.0.0.1", control_port))
        print("fleet ready", flush=True)
        await asyncio.Event().wait()

    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))
    asyncio.run(main())


# ---------------------------------------------------------------- the cluster


@dataclass
class Fleet:
    """The trainer pods as registered in kube-apiserver, and their exposition server."""

    names: list[str]
    ips: dict[str, str]
    labels: dict[str, str]
    process: ManagedProcess
    control_port: int

    def set_gpu(self, pod: str, value: float) -> float:
        """Sets a pod's GPU gauge in the fleet; returns the time it was set."""
        r = requests.get(
            f"http://127.0.0.1:{self.control_port}/set",
            params={"ip": self.ips[pod], "gpu": str(value)},
            timeout=10,
        )
        r.raise_for_status()
        return float(r.text)


def loopback_ips(count: int) -> list[str]:
    """`count` distinct addresses from random 127.x.y.0/24 networks (never 127.0.0.0/16)."""
    rnd = random.Random()
    base = rnd.randint(100, 250)
    third = rnd.randint(0, 200)
    out: list[str] = []
    while len(out) < count:
        out.extend(f"127.{base}.{third}.{h}" for h in range(2, 252))
        third += 1
    return out[:count]


def make_fleet(cp: ControlPlane, pods: int, work: Path) -> Fleet:
    """The Deployment, its pods Running on loopback IPs with slice labels, and the fleet."""
    t0 = time.monotonic()
    cp.request("POST", "/api/v1/namespaces", json={"metadata": {"name": NS}}, ok=(201,))
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": NS},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "containers": [{"name": "trainer", "image": "edl-bench/none:0"}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }
    cp.request("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", json=deployment, ok=(201,))

    def all_created() -> list[str] | None:
        items = cp.request("GET", f"/api/v1/namespaces/{NS}/pods").json()["items"]
        return sorted(p["metadata"]["name"] for p in items) if len(items) == pods else None

    names = wait_for(all_created, timeout_s=600, what=f"{pods} pods created", interval_s=2)
    ips = dict(zip(names, loopback_ips(pods), strict=True))
    labels = {}
    for i, name in enumerate(names):
        labels[name] = "s10" if i < 10 else "s100" if i < 100 else "rest"
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    session = requests.Session()
    assert cp.pki is not None
    session.cert = (str(cp.pki.admin.cert), str(cp.pki.admin.key))
    merge = {"Content-Type": "application/merge-patch+json"}
    ca = str(cp.pki.ca.cert)  # per request: a session's verify loses to REQUESTS_CA_BUNDLE

    def register(name: str) -> None:
        url = f"{cp.server}/api/v1/namespaces/{NS}/pods/{name}"
        meta = {"metadata": {"labels": {"bench-slice": labels[name]}}}
        ip = ips[name]
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": started}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "hostIP": "127.0.0.1",
                "startTime": started,
                "conditions": conditions,
            }
        }
        for target, body in ((url, meta), (f"{url}/status", status)):
            r = session.patch(target, data=json.dumps(body), headers=merge, timeout=30, verify=ca)
            if r.status_code != 200:
                raise HarnessError(f"PATCH {target}: {r.status_code} {r.text[:300]}")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(register, names))
    spec_file = work / "fleet.json"
    spec_file.write_text(json.dumps({ips[n]: 100.0 + i % 50 for i, n in enumerate(names)}))
    control = free_port()
    proc = ManagedProcess(
        "fleet",
        [sys.executable, __file__, "--serve-fleet", str(spec_file), "--port", str(control)],
        cp.log_dir / "fleet.log",
    )
    proc.start()
    wait_for(
        lambda: "fleet ready" in proc.tail(5),
        timeout_s=120,
        what="fleet listening",
        describe=lambda: proc.tail(20),
    )
    print(f"  {pods} pods registered and served in {time.monotonic() - t0:.0f} s", flush=True)
    return Fleet(names, ips, labels, proc, control)


def start_prometheus(fleet: Fleet, interval: float, work: Path, log_dir: Path) -> Any:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("bench_adapter_peer: prometheus not found; run `make system-deps`")
    targets = [
        {
            "targets": [f"{fleet.ips[name]}:9400"],
            "labels": {
                "namespace": NS,
                "pod": name,
                "app": "trainer",
                "deployment": "trainer",
            },
        }
        for name in fleet.names
    ]
    config = {
        "global": {
            "scrape_interval": f"{int(interval * 1000)}ms",
            "scrape_timeout": f"{int(interval * 800)}ms",
        },
        "scrape_configs": [{"job_name": "edl-agents", "static_configs": targets}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = ManagedProcess(
        "prometheus",
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        log_dir / "prometheus.log",
    )
    proc.start()
    url = f"http://127.0.0.1:{port}"
    wait_for(
        lambda: requests.get(f"{url}/-/ready", timeout=2).ok,
        timeout_s=120,
        what="prometheus ready",
        describe=lambda: proc.tail(20),
    )
    return proc, url


def ensure_peer() -> Path:
    """bench/peer/build.sh: instant when cached; a cold build prints its own progress."""
    t0 = time.monotonic()
    print("peer: bench/peer/build.sh (prometheus-adapter from the Go module proxy)", flush=True)
    done = subprocess.run(
        ["bash", str(PEER_BUILD)], stdout=subprocess.PIPE, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"bench_adapter_peer: building the peer failed (rc {done.returncode})")
    print(f"peer: ready in {time.monotonic() - t0:.0f} s", flush=True)
    return Path(done.stdout.strip().splitlines()[-1])


def start_peer(
    binary: Path, cp: ControlPlane, prometheus_url: str, qps: float
) -> tuple[ManagedProcess, int]:
    assert cp.pki is not None
    port = free_port()
    kube = str(cp.kubeconfig)
    proc = ManagedProcess(
        "prometheus-adapter",
        [
            str(binary),
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--tls-cert-file={cp.pki.adapter.cert}",
            f"--tls-private-key-file={cp.pki.adapter.key}",
            f"--lister-kubeconfig={kube}",
            f"--authentication-kubeconfig={kube}",
            f"--authorization-kubeconfig={kube}",
            f"--prometheus-url={prometheus_url}",
            f"--config={PEER_RULES}",
            "--metrics-relist-interval=1m",  # as in prometheus-adapter's own manifests
            # its pod LIST per request goes through client-go's limiter (5 QPS, burst 10 by
            # default): raised, so the engine is measured and not the limiter
            f"--client-qps={qps:g}",
            f"--client-burst={int(qps * 2)}",
            f"--cert-dir={cp.work_dir / 'peer-certs'}",
            "--v=1",
        ],
        cp.log_dir / "prometheus-adapter.log",
    )
    proc.start()
    return proc, port


# ---------------------------------------------------------------- measuring


@dataclass
class Target:
    """One way to reach one adapter."""

    adapter: str  # "edl" | "peer"
    via: str  # "direct" | "aggregator"
    port: int
    context: ssl.SSLContext
    pid: int  # the adapter's process


@dataclass
class Result:
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    cpu_adapter: list[float] = field(default_factory=list)  # ms per request
    cpu_total: list[float] = field(default_factory=list)
    body_kb: float = 0.0
    items: int = 0


def client_context(cp: ControlPlane) -> ssl.SSLContext:
    assert cp.pki is not None
    ctx = ssl.create_default_context(cafile=str(cp.pki.ca.cert))
    ctx.load_cert_chain(str(cp.pki.admin.cert), str(cp.pki.admin.key))
    return ctx


def cpu_seconds(pids: list[int]) -> list[float]:
    out = []
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        out.append(t.user + t.system)
    return out


def rss_mb(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def measure(
    target: Target,
    path: str,
    seconds: float,
    concurrency: int,
    others: list[int],
    idle: dict[int, float],
    result: Result,
) -> None:
    """Latency with one keep-alive client, then req/s and CPU/request with `concurrency`."""
    conn = RawClient(target.port, True, target.context)
    body = conn.get(path)
    result.body_kb = len(body) / 1024
    result.items = len(json.loads(body)["items"])
    times: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and len(times) < 20000:
        t0 = time.perf_counter()
        conn.get(path)
        times.append(time.perf_counter() - t0)
    conn.close()
    result.p50.append(percentile(times, 50) * 1000)
    result.p99.append(percentile(times, 99) * 1000)

    pids = [target.pid, *others]
    counts = [0] * concurrency
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        c = RawClient(target.port, True, target.context)
        while time.perf_counter() < stop:
            c.get(path)
            counts[k] += 1
        c.close()

    before, t0 = cpu_seconds(pids), time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    elapsed = time.perf_counter() - t0
    after = cpu_seconds(pids)
    n = max(1, sum(counts))
    spent = zip(after, before, pids, strict=True)
    used = [max(0.0, a - b - idle[pid] * elapsed) for a, b, pid in spent]
    result.rate.append(sum(counts) / elapsed)
    result.cpu_adapter.append(used[0] / n * 1000)
    result.cpu_total.append(sum(used) / n * 1000)


def idle_rates(pids: list[int], seconds: float = 3.0) -> dict[int, float]:
    """CPU seconds per second each process spends with no request (scraping, watching)."""
    before = cpu_seconds(pids)
    time.sleep(seconds)
    after = cpu_seconds(pids)
    return {pid: (a - b) / seconds for pid, a, b in zip(pids, after, before, strict=True)}


def point_apiservice(cp: ControlPlane, port: int, marker: Callable[[], bool]) -> None:
    """Points the v1beta2 APIService at `port` and waits until answers come from there."""
    cp.request(
        "PATCH",
        f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}",
        data=json.dumps({"spec": {"service": {"port": port}}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    wait_for(marker, timeout_s=90, what=f"{APISERVICE} serving from port {port}", interval_s=0.5)


def register_apiservice(cp: ControlPlane, port: int) -> None:
    """The ExternalName Service and the v1beta2 APIService (the cluster CA as caBundle)."""
    assert cp.pki is not None
    import base64

    base = f"/api/v1/namespaces/{ADAPTER_SERVICE_NAMESPACE}/services"
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_SERVICE_NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
    }
    cp.request("POST", base, json=svc, ok=(201,))
    cp.request(
        "POST",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        json={
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": "custom.metrics.k8s.io",
                "version": "v1beta2",
                "groupPriorityMinimum": 100,
                "versionPriority": 200,
                "caBundle": base64.b64encode(cp.pki.ca.cert.read_bytes()).decode(),
                "service": {
                    "name": ADAPTER_SERVICE,
                    "namespace": ADAPTER_SERVICE_NAMESPACE,
                    "port": port,
                },
            },
        },
        ok=(201,),
    )


def items_of(port: int, ctx: ssl.SSLContext, path: str) -> list[dict[str, Any]]:
    conn = RawClient(port, True, ctx)
    try:
        return list(json.loads(conn.get(path))["items"])
    finally:
        conn.close()


def quiet_items(port: int, ctx: ssl.SSLContext, path: str) -> list[dict[str, Any]]:
    try:
        return items_of(port, ctx, path)
    except (OSError, RuntimeError, ValueError, KeyError):
        return []


def served_by_peer(items: list[dict[str, Any]]) -> bool:
    """prometheus-adapter writes `describedObject.apiVersion` of a pod as "/v1"; EDL "v1"."""
    return bool(items) and items[0]["describedObject"].get("apiVersion") == "/v1"


def freshness(
    fleet: Fleet,
    pod: str,
    endpoints: dict[str, tuple[int, ssl.SSLContext]],
    changes: int,
    interval: float,
) -> dict[str, list[float]]:
    """A pod's GPU gauge changes in the fleet; per adapter, seconds until its API shows it.

    Each change waits a random part of a scrape interval first, so changes do not lock onto
    one scraper's phase (the next change would otherwise follow the slower one's scrape).
    """
    timeout_s = 6 * interval + 30
    path = f"{CM}/pods/{pod}/gpu_utilization"
    delays: dict[str, list[float]] = {name: [] for name in endpoints}
    for k in range(changes):
        value = round(0.1 + 0.8 * (k % 2) + 0.01 * k, 3)
        time.sleep(random.uniform(0.0, interval))
        set_at = fleet.set_gpu(pod, value)

        def watch(
            name: str, port: int, ctx: ssl.SSLContext, value: float = value, set_at: float = set_at
        ) -> None:
            deadline = time.monotonic() + timeout_s
            conn: RawClient | None = None
            while time.monotonic() < deadline:
                try:
                    conn = conn or RawClient(port, True, ctx)
                    items = json.loads(conn.get(path))["items"]
                    if items and abs(parse_value(items[0]["value"]) - value) < 1e-3:
                        delays[name].append(time.time() - set_at)
                        break
                except (OSError, RuntimeError, ValueError, KeyError):
                    conn = None
                time.sleep(0.02)
            if conn is not None:
                conn.close()

        threads = [
            threading.Thread(target=watch, args=(name, port, ctx))
            for name, (port, ctx) in endpoints.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 30)
    return delays


def parse_value(quantity: str) -> float:
    from edl_common.quantity import parse_quantity

    return float(parse_quantity(quantity))


# ---------------------------------------------------------------- report


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def report(results: dict[tuple[str, str, str], Result], names: list[str]) -> None:
    cols = (
        f"{'query':<12} {'via':<10} {'items':>5} "
        f"{'p50 ms EDL/peer':>17} {'ratio':>5} {'p99 ms EDL/peer':>17} {'ratio':>5} "
        f"{'req/s EDL/peer':>16} {'ratio':>6} {'CPU ms/req EDL/peer':>20} {'ratio':>5} "
        f"{'+Prom+apiserver':>17}"
    )
    print(cols)
    for via in ("direct", "aggregator"):
        for q in names:
            e, p = results.get(("edl", via, q)), results.get(("peer", via, q))
            if e is None or p is None:
                continue
            ep50, pp50, ep99, pp99 = med(e.p50), med(p.p50), med(e.p99), med(p.p99)
            er, pr = med(e.rate), med(p.rate)
            ec, pc, et, pt = (
                med(e.cpu_adapter),
                med(p.cpu_adapter),
                med(e.cpu_total),
                med(p.cpu_total),
            )
            print(
                f"{q:<12} {via:<10} {e.items:>5} "
                f"{ep50:>8.2f}/{pp50:<8.2f} {ratio(ep50, pp50):>5} "
                f"{ep99:>8.2f}/{pp99:<8.2f} {ratio(ep99, pp99):>5} "
                f"{er:>7.0f}/{pr:<8.0f} {ratio(er, pr):>6} "
                f"{ec:>9.2f}/{pc:<10.2f} {ratio(ec, pc):>5} "
                f"{et:>7.2f}/{pt:<7.2f}{ratio(et, pt):>5}",
                flush=True,
            )


# ---------------------------------------------------------------- main


def run(args: argparse.Namespace) -> None:
    load0 = os.getloadavg()
    print(
        f"bench_adapter_peer: {os.cpu_count()} CPUs, load average {load0[0]:.1f} "
        f"{load0[1]:.1f} {load0[2]:.1f}; {args.pods} pods, scrape interval "
        f"{args.scrape_interval:g} s, {args.rounds} rounds A/B, {args.concurrency} clients",
        flush=True,
    )
    peer_bin = ensure_peer()
    work = Path(tempfile.mkdtemp(prefix="edl-bench-peer-"))
    cp = ControlPlane(ControlPlaneSettings(bin_dir=ensure_binaries(), work_dir=work))
    procs: list[Any] = []
    try:
        cp.start()
        print(f"control plane up; logs in {cp.log_dir}", flush=True)
        fleet = make_fleet(cp, args.pods, work)
        procs.append(fleet.process)
        prom, prom_url = start_prometheus(fleet, args.scrape_interval, work, cp.log_dir)
        procs.append(prom)
        edl = MetricsAdapter(
            cp,
            AdapterSettings(
                scrape_interval=f"{args.scrape_interval:g}s",
                window=None,  # the built-in catalogue: 30 s windows, as the peer's rules
                access_log=False,
                ready_timeout_s=120,
                extra_args=["--log-level=warning"],
            ),
        )
        edl.start()
        procs.append(edl)
        ctx = client_context(cp)
        qs = queries(args.pods)
        full = qs[f"pods/* {args.pods}"]
        wait_for(
            lambda: len(quiet_items(edl.port, ctx, full)) == args.pods,
            timeout_s=300,
            what=f"EDL serving {args.pods} pods",
            interval_s=2,
        )
        wait_for(
            lambda: (
                len(
                    requests.get(
                        f"{prom_url}/api/v1/query",
                        params={"query": "count_over_time(edl_trainer_samples_total[30s]) >= 2"},
                        timeout=10,
                    ).json()["data"]["result"]
                )
                == args.pods
            ),
            timeout_s=300,
            what="Prometheus: two samples of every pod",
            interval_s=2,
        )
        peer, peer_port = start_peer(peer_bin, cp, prom_url, args.peer_client_qps)
        procs.append(peer)
        wait_for(
            lambda: len(quiet_items(peer_port, ctx, full)) == args.pods,
            timeout_s=300,
            what=f"prometheus-adapter serving {args.pods} pods",
            interval_s=2,
            describe=lambda: peer.tail(20),
        )
        register_apiservice(cp, edl.port)
        agg = cp.apiserver_port
        assert cp.apiserver is not None and cp.apiserver.pid and edl.process.pid and peer.pid
        wait_for(
            lambda: quiet_items(agg, ctx, full) and not served_by_peer(quiet_items(agg, ctx, full)),
            timeout_s=120,
            what="aggregator serving EDL",
        )
        pod = fleet.names[0]
        paths = {name: path.format(pod=pod) for name, path in qs.items()}
        pids = {"edl": edl.process.pid, "peer": peer.pid}
        ports = {"edl": edl.port, "peer": peer_port}
        others = [prom.pid, cp.apiserver.pid]
        rss_start = {name: rss_mb(pid) for name, pid in pids.items()}
        prom_rss = rss_mb(prom.pid)
        results: dict[tuple[str, str, str], Result] = {}
        for rnd in range(args.rounds):
            order = ["edl", "peer"] if rnd % 2 == 0 else ["peer", "edl"]
            for name in order:
                idle = idle_rates([pids[name], *others])
                targets = [Target(name, "direct", ports[name], ctx, pids[name])]
                if not args.no_aggregator:
                    want_peer = name == "peer"

                    def pointed(want: bool = want_peer) -> bool:
                        return served_by_peer(quiet_items(agg, ctx, full)) == want

                    point_apiservice(cp, ports[name], pointed)
                    targets.append(Target(name, "aggregator", agg, ctx, pids[name]))
                for target in targets:
                    for q, path in paths.items():
                        res = results.setdefault((name, target.via, q), Result())
                        measure(target, path, args.seconds, args.concurrency, others, idle, res)
                print(f"  round {rnd + 1}: {name} measured", flush=True)
        rss_end = {name: rss_mb(pid) for name, pid in pids.items()}
        load1 = os.getloadavg()
        print()
        print(
            f"== {args.pods} pods, medians of {args.rounds} rounds; ratio = EDL/peer; "
            f"load average now {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}"
        )
        report(results, list(paths))
        print(
            f"RSS MB (start of measuring / end): EDL {rss_start['edl']:.0f} / {rss_end['edl']:.0f}"
            f", prometheus-adapter {rss_start['peer']:.0f} / {rss_end['peer']:.0f} "
            f"(ratio {ratio(rss_end['edl'], rss_end['peer'])}), its Prometheus {prom_rss:.0f} / "
            f"{rss_mb(prom.pid):.0f}"
        )
        if args.freshness_changes:
            delays = freshness(
                fleet,
                pod,
                {"edl": (edl.port, ctx), "peer": (peer_port, ctx)},
                args.freshness_changes,
                args.scrape_interval,
            )
            parts = []
            for name, ds in delays.items():
                if ds:
                    parts.append(
                        f"{name} mean {statistics.mean(ds):.2f} s, max {max(ds):.2f} s "
                        f"({len(ds)}/{args.freshness_changes})"
                    )
                else:
                    parts.append(f"{name}: never visible")
            e, p = delays["edl"], delays["peer"]
            r = ratio(statistics.mean(e), statistics.mean(p)) if e and p else "-"
            print(
                f"freshness (gauge change in the agent -> API value, scrape interval "
                f"{args.scrape_interval:g} s): " + "; ".join(parts) + f"; ratio {r}"
            )
    finally:
        for p in reversed(procs):
            with contextlib.suppress(Exception):
                p.stop()
        cp.stop()
        shutil.rmtree(work / "tsdb", ignore_errors=True)
        print(f"logs kept in {cp.log_dir}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2, help="A/B rounds (medians are printed)")
    ap.add_argument("--seconds", type=float, default=3.0, help="per query and measurement")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--scrape-interval", type=float, default=10.0, help="seconds, both adapters")
    ap.add_argument("--freshness-changes", type=int, default=6)
    ap.add_argument("--no-aggregator", action="store_true", help="only each adapter's own port")
    ap.add_argument(
        "--peer-client-qps",
        type=float,
        default=1000.0,
        help="prometheus-adapter --client-qps (its default 5 caps pods/* at ~5 req/s)",
    )
    ap.add_argument("--serve-fleet", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_fleet is not None:
        serve_fleet(args.serve_fleet, args.port)
        return
    run(args)


if __name__ == "__main__":
    main()
