"""The real `edl-adapter` process under attack, on loopback.

- a seeded fuzz of 10,000 malformed requests over TLS: no 5xx, every error a matching Status;
- slow and half-open TLS connections do not starve it (the HPA's view through a real
  aggregator is in tests/e2e/metrics_adapter/test_adapter_hardening.py);
- an expiring front-proxy certificate is refused on the same connection and on a resumed
  TLS session; the access log names the authenticated user, not the one a client claims;
- a rotated serving certificate is used by new connections without a restart;
- the front end: the path routed is the request line's own (RFC 9112 §3.2), chunked with any
  Content-Length is a 400 Status, the listen backlog is the one asked for, a close_notify and
  half-close logs nothing, and idle unauthenticated keep-alive leaves the front proxy room;
- a scrape target inventing label sets, and 3,000 distinct metricLabelSelectors at 1,000
  pods, leave memory bounded and the other pods' values right;
- issue 37: strangers pipelining thousands of requests leave the front proxy answered, a
  request body is read (and ``100 Continue`` sent) only after authentication, and 1,500
  half-open handshakes keep the process under 80 % of its memory budget.
"""

from __future__ import annotations

import datetime
import http.server
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from tests.support import http_fuzz
from tests.support.adapter_processes import (
    ADAPTER,
    Adapter,
    Proc,
    spawn,
)
from tests.support.net import free_port, listen_backlog
from tests.support.path_confusion import confused_paths
from tests.support.pki import Issued, issue, make_ca
from tests.support.slow_clients import (
    HalfOpenConnections,
    IdleKeepAlive,
    Pipelining,
    SlowBodies,
    loopback_sources,
    request_then_close_notify,
)
from tests.support.waiting import wait_for

# The bound is for a hung test, not a speed limit: the 10,000-request fuzz took 181 s at load
# 7-12 and ran past 300 s at load 25-30, so it is set well beyond a loaded machine's time.
pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]

QUERY = (
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/samples_per_second"
    "?labelSelector=app%3Dtrainer"
)


# ----------------------------------------------------------------- agents and clients


class _Agents(http.server.BaseHTTPRequestHandler):
    """`/pod/<i>`: counters growing 100 samples/s; `/flood`: 20,000 new label sets on every
    answer; `/churn`: 300 new label sets on every answer (under the per-scrape cap)."""

    protocol_version = "HTTP/1.1"
    started = time.time()
    serial = [0]

    def do_GET(self) -> None:
        if self.path in ("/flood", "/churn"):
            n = 20_000 if self.path == "/flood" else 300
            base = self.serial[0]
            self.serial[0] += n
            body = "".join(
                f'edl_gpu_utilization_ratio{{gpu="{base + i}"}} 0.5\n' for i in range(n)
            ).encode()
        else:
            t = time.time() - self.started
            body = (
                f"edl_trainer_samples_total {100.0 * t:.3f}\n"
                'edl_gpu_utilization_ratio{gpu="0"} 0.75\n'
            ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def agents() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Agents)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def pods(agent_port: int, n: int, **paths: str) -> list[dict[str, Any]]:
    listed = [(f"trainer-{i}", f"/pod/{i}") for i in range(n)] + list(paths.items())
    return [
        {
            "namespace": "ml",
            "name": name,
            "labels": {"app": "trainer"},
            "deployment": "trainer",
            "url": f"http://127.0.0.1:{agent_port}{path}",
        }
        for name, path in listed
    ]


def launch(workdir: Path, pod_list: list[dict[str, Any]], *args: str) -> Adapter:
    """`edl-adapter serve` on a static pod list, TLS from `workdir/certs` unless given."""
    port = free_port()
    pods_file = workdir / "pods.yaml"
    pods_file.write_text(yaml.safe_dump({"pods": pod_list}))
    argv = [
        ADAPTER,
        "serve",
        "--host=127.0.0.1",
        f"--port={port}",
        "--source=static",
        f"--static-file={pods_file}",
        "--access-log",
        *args,
    ]
    if not any(a.startswith("--tls-cert-file") for a in args):
        argv.append(f"--cert-dir={workdir / 'certs'}")
    proc = spawn(f"adapter-{port}", argv, workdir)
    adapter = Adapter(proc, port, workdir)

    def healthy() -> bool:
        if proc.popen.poll() is not None:
            raise AssertionError(f"edl-adapter exited: {proc.tail()}")
        return tls_get(port, "/healthz")[0] == 200

    try:
        wait_for(healthy, timeout_s=60, what="edl-adapter /healthz", interval_s=0.2)
    except AssertionError:
        proc.stop()
        raise
    return adapter


def client_context(pair: Issued | None = None, directory: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if pair is not None:
        assert directory is not None
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / "client.crt", directory / "client.key"
        cert.write_bytes(pair.pem)
        key.write_bytes(pair.key_pem)
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def exchange(
    sock: socket.socket, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One keep-alive request on an open connection."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return int(head[9:12]), body


def tls_get(
    port: int, path: str, ctx: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with (ctx or client_context()).wrap_socket(raw) as sock:
        return exchange(sock, path, headers)


def self_metric(port: int, name: str) -> float:
    text = tls_get(port, "/metrics")[1].decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + " ", name + "{"))
    )


@dataclass
class Pki:
    front_proxy_ca: Issued
    proxy: Issued
    dir: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca("front-proxy-ca")
    (d / "front-proxy-ca.crt").write_bytes(ca.cert.public_bytes(Encoding.PEM))
    return Pki(ca, issue(ca, "front-proxy-client"), d)


def _delegated(
    tmp_path_factory: pytest.TempPathFactory,
    agents: int,
    pki: Pki,
    name: str,
    handshake: str,
    head: str = "500ms",
) -> Adapter:
    """Delegated requestheader authentication (no cluster: authorization off), and the TLS
    handshake and request-head deadlines given."""
    return launch(
        tmp_path_factory.mktemp(name),
        pods(agents, 2),
        "--scrape-interval=1s",
        "--authentication=delegated",
        "--authentication-skip-lookup",
        f"--requestheader-client-ca-file={pki.dir / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--authorization=none",
        f"--tls-handshake-timeout={handshake}",
        f"--request-header-timeout={head}",
    )


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, agents: int, pki: Pki) -> Iterator[Adapter]:
    """Short deadlines (a 3 s handshake) so the slow-client cases finish quickly."""
    adapter = _delegated(tmp_path_factory, agents, pki, "guarded", "3s")
    yield adapter
    adapter.proc.stop()


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, agents: int, pki: Pki) -> Iterator[Adapter]:
    """The same, but a handshake may take a minute and a head 5 s: the fuzz never stalls
    either. Against 3 s, one case of 10,000 once got no answer beside two burners and another
    test run, with nothing logged: most likely its handshake outlasted the deadline on the
    server's side after the client had finished its own (TLS 1.3). With the handshake at 60 s
    and the head at 500 ms, one case of 10,000 got no answer beside two burners: the server
    closes a connection that sent no byte within the head deadline after its handshake, as it
    should, and under that load one of the 32 client threads can take longer than 500 ms to
    send. The truncated cases (about 5 %) still end on this deadline, as 408s."""
    adapter = _delegated(tmp_path_factory, agents, pki, "fuzzed", "60s", head="5s")
    yield adapter
    adapter.proc.stop()


# ----------------------------------------------------------------- tests


def test_a_fuzz_of_10000_malformed_requests_gets_only_matching_status_errors(
    fuzzed: Adapter, pki: Pki
) -> None:
    contexts = [client_context(), client_context(pki.proxy, pki.dir / "fuzz")]
    local = threading.local()

    def connect() -> socket.socket:
        which = local.n = getattr(local, "n", 0) + 1
        ctx = contexts[which % 2]  # half the connections come from the front proxy
        sessions = local.__dict__.setdefault("sessions", {})
        raw = socket.create_connection(("127.0.0.1", fuzzed.port), timeout=30)
        sock = ctx.wrap_socket(raw, session=sessions.get(which % 2))
        sessions[which % 2] = sock.session
        return sock

    def one(case: http_fuzz.Case) -> tuple[http_fuzz.Case, http_fuzz.Answer, str | None]:
        answer = http_fuzz.send(case, connect, half_close=False)
        return case, answer, http_fuzz.problem(case, answer)

    started = time.monotonic()
    codes: dict[int | None, int] = {}
    problems = []
    with ThreadPoolExecutor(32) as pool:
        for case, answer, problem in pool.map(one, http_fuzz.cases(seed=14, count=10_000)):
            codes[answer.status] = codes.get(answer.status, 0) + 1
            if problem:
                problems.append((case.kind, case.data[:200], problem))
    print(f"\nfuzz: 10,000 cases in {time.monotonic() - started:.1f} s, answers {codes}")
    assert not problems, problems[:10]
    assert sum(n for code, n in codes.items() if code and code >= 400) > 5000  # it did bite
    assert "Traceback" not in fuzzed.proc.tail(200_000)


def test_slow_handshakes_and_idle_connects_do_not_starve_it(guarded: Adapter) -> None:
    with HalfOpenConnections(guarded.port, partial=100, idle=100) as holder:
        times: list[float] = []
        failures: list[int | str] = []
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            t = time.perf_counter()
            try:
                code, _ = tls_get(guarded.port, QUERY)
                times.append((time.perf_counter() - t) * 1000)
                if code != 200:
                    failures.append(code)
            except OSError as e:
                failures.append(repr(e))
            time.sleep(0.05)  # pacing a legitimate client while the attack holds
        # the server's handshake deadline (3 s here) dropped the half-open ones
        wait_for(
            lambda: holder.dropped >= 100,
            timeout_s=30,
            what="hostile connections dropped",
            interval_s=0.2,
        )
    times.sort()
    print(
        f"\nunder 200 held connections: {len(times)} answers, p50 {times[len(times) // 2]:.1f} ms"
    )
    assert not failures
    assert len(times) >= 10


def test_an_expiring_front_proxy_certificate_is_refused_on_the_same_and_a_resumed_session(
    guarded: Adapter, pki: Pki, tmp_path: Path
) -> None:
    alice = {"X-Remote-User": "alice", "X-Remote-Group": "ml,readers"}
    for margin in (4.0, 15.0, 45.0):  # a loaded machine may need longer to get the first answer
        pair = issue(
            pki.front_proxy_ca,
            "front-proxy-client",
            valid_for=datetime.timedelta(seconds=margin),
        )
        expiry = pair.cert.not_valid_after_utc.timestamp()
        ctx = client_context(pair, tmp_path / f"m{margin}")
        sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", guarded.port), timeout=30))
        code, body = exchange(sock, QUERY, alice)
        if time.time() < expiry - 0.5:
            break
        sock.close()
    assert code == 200, body
    session = sock.session
    assert session is not None
    wait_for(
        lambda: time.time() > expiry + 1.0,
        timeout_s=120,
        what="the certificate expired",
        interval_s=0.2,
    )
    # the same, still open connection
    code, body = exchange(sock, QUERY, alice)
    assert code == 401, body
    status = json.loads(body)
    assert (status["kind"], status["reason"]) == ("Status", "Unauthorized")
    assert "expired" in status["message"]
    sock.close()
    # a resumed session (no certificate verification in the handshake)
    raw = socket.create_connection(("127.0.0.1", guarded.port), timeout=30)
    with ctx.wrap_socket(raw, session=session) as resumed:
        assert resumed.session_reused
        code, body = exchange(resumed, QUERY, alice)
    assert code == 401, body
    # the access log names who was served, never a claimed identity
    lines = guarded.proc.tail(400_000).splitlines()
    assert any('" 200 ' in ln and 'user="alice"' in ln for ln in lines)
    tls_get(guarded.port, QUERY, headers={"X-Remote-User": "mallory"})  # no proxy certificate
    wait_for(
        lambda: any('user="system:anonymous"' in ln for ln in guarded.proc.tail(4000).splitlines()),
        timeout_s=60,
        what="the spoofed request logged as anonymous",
        interval_s=0.2,
    )
    assert 'user="mallory"' not in guarded.proc.tail(400_000)


def _served_cn(port: int) -> str:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with client_context().wrap_socket(raw) as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return str(x509.load_der_x509_certificate(der).subject.rfc4514_string())


def test_a_rotated_serving_certificate_is_used_by_new_connections(
    tmp_path: Path, agents: int
) -> None:
    ca = make_ca("serving-ca")
    san: list[x509.GeneralName] = [x509.DNSName("localhost")]
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"

    def install(cn: str) -> None:  # like a Secret volume update: each file replaced at once
        pair = issue(ca, cn, client=False, san=san)
        for path, data in ((cert, pair.pem), (key, pair.key_pem)):
            tmp = path.with_suffix(".new")
            tmp.write_bytes(data)
            os.replace(tmp, path)

    install("first")
    adapter = launch(
        tmp_path,
        pods(agents, 1),
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        "--reload-interval=500ms",
        "--authentication=none",
        "--authorization=none",
    )
    try:
        assert _served_cn(adapter.port) == "CN=first"
        kept = client_context().wrap_socket(
            socket.create_connection(("127.0.0.1", adapter.port), timeout=30)
        )
        assert exchange(kept, "/healthz")[0] == 200
        install("second")
        wait_for(
            lambda: _served_cn(adapter.port) == "CN=second",
            timeout_s=30,
            what="the new pair served",
            interval_s=0.2,
        )
        assert exchange(kept, "/healthz")[0] == 200  # open connections keep working
        kept.close()
        key.write_bytes(b"not a key")  # a broken rotation: the working pair stays
        wait_for(
            lambda: "the new pair does not load" in adapter.proc.tail(),
            timeout_s=60,
            what="the adapter to refuse the broken pair",
            interval_s=0.2,
        )
        assert _served_cn(adapter.port) == "CN=second"
    finally:
        adapter.proc.stop()


def _rss_mb(proc: Proc) -> float:
    """RSS of the adapter and any children (a pre-fork server keeps the app in a child)."""
    root = psutil.Process(proc.popen.pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 1e6


def test_a_target_inventing_label_sets_is_capped_and_others_stay_right(
    tmp_path: Path, agents: int
) -> None:
    adapter = launch(
        tmp_path,
        pods(agents, 3, **{"flood-0": "/flood", "churn-0": "/churn"}),
        "--scrape-interval=1s",
        "--max-series-per-pod=500",
        "--series-prune-after=5s",
        "--authentication=none",
        "--authorization=none",
    )
    try:
        port = adapter.port
        errors = 'edl_adapter_scrape_errors_total{reason="too_many_series"}'
        wait_for(
            lambda: self_metric(port, errors) >= 5,
            timeout_s=60,
            what="five refused floods",
            interval_s=0.2,
        )
        wait_for(
            lambda: self_metric(port, "edl_adapter_series_refused_total") > 5 * 501 + 300,
            timeout_s=60,
            what="churn refused at the cap",
            interval_s=0.2,
        )
        series = self_metric(port, "edl_adapter_store_series")
        rss = _rss_mb(adapter.proc)
        print(f"\nhostile targets: {series:.0f} series stored, RSS {rss:.0f} MB")
        assert series <= 500 + 3 * 2  # the churning pod at its cap, the flood refused whole
        assert rss < 200  # before the cap: 1 GB after 60 s of this
        items = json.loads(tls_get(port, QUERY)[1])["items"]
        rates = {i["describedObject"]["name"]: i["value"] for i in items}
        assert set(rates) == {"trainer-0", "trainer-1", "trainer-2"}
        for value in rates.values():
            assert 90 <= _quantity(value) <= 110  # 100 samples/s
        assert "exceeds the series cap (500 label sets" in adapter.proc.tail(200_000)
    finally:
        adapter.proc.stop()


def _quantity(text: str) -> float:
    from edl_common.quantity import parse_quantity

    return float(parse_quantity(text))


def test_3000_distinct_metric_selectors_at_1000_pods_keep_memory_bounded(
    tmp_path: Path, agents: int
) -> None:
    adapter = launch(
        tmp_path,
        pods(agents, 1000),
        "--scrape-interval=60s",  # one round of scrapes fills the store
        "--stale-after=1h",
        "--authentication=none",
        "--authorization=none",
        "--log-level=warning",
    )
    try:
        path = QUERY.replace("samples_per_second", "gpu_utilization")
        # (`Connection: close`: a 200 KB answer must arrive whole before the server closes)
        close = {"Connection": "close"}
        wait_for(
            lambda: len(json.loads(tls_get(adapter.port, path, headers=close)[1])["items"]) == 1000,
            timeout_s=120,
            what="1,000 pods with a value",
            interval_s=0.2,
        )
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow, small reader
        raw.settimeout(60)
        raw.connect(("127.0.0.1", adapter.port))
        with client_context().wrap_socket(raw) as slow:
            slow.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            time.sleep(1.0)  # the answer waits in the server's buffers, then the server closes
            data = b""
            while chunk := slow.recv(65536):
                data += chunk
        assert len(json.loads(data.partition(b"\r\n\r\n")[2])["items"]) == 1000
        before = peak = _rss_mb(adapter.proc)
        raw = socket.create_connection(("127.0.0.1", adapter.port), timeout=60)
        with client_context().wrap_socket(raw) as sock:
            for i in range(3000):
                code, body = exchange(sock, f"{path}&metricLabelSelector=gpu%3D{i}")
                assert code == 200, body
                if i % 250 == 0:
                    peak = max(peak, _rss_mb(adapter.proc))
        peak = max(peak, _rss_mb(adapter.proc))
        print(f"\n3,000 selectors at 1,000 pods: RSS {before:.0f} -> peak {peak:.0f} MB")
        assert peak - before < 64  # unbounded memo: +220 MB here
    finally:
        adapter.proc.stop()


# ----------------------------------------------------------------- the HTTP front end itself

API = "/apis/custom.metrics.k8s.io/v1beta2"
CONFUSED = confused_paths("scratch", "ml", "trainer-1")


@pytest.fixture(scope="module")
def two_namespaces(tmp_path_factory: pytest.TempPathFactory, agents: int) -> Iterator[Adapter]:
    workdir = tmp_path_factory.mktemp("namespaces")
    listed = pods(agents, 2)
    listed.append({**listed[0], "namespace": "scratch", "name": "a"})
    adapter = launch(
        workdir, listed, "--scrape-interval=1s", "--authentication=none", "--authorization=none"
    )
    wait_for(
        lambda: (
            tls_get(adapter.port, f"{API}/namespaces/ml/pods/trainer-1/samples_per_second")[0]
            == 200
        ),
        timeout_s=60,
        what="trainer-1 has a value",
        interval_s=0.2,
    )
    yield adapter
    adapter.proc.stop()


@pytest.mark.parametrize("path", CONFUSED)
def test_an_origin_form_path_with_a_scheme_inside_is_routed_as_written(
    two_namespaces: Adapter, path: str
) -> None:
    code, body = tls_get(two_namespaces.port, path)
    status = json.loads(body)
    assert code in (400, 404) and (status["kind"], status["code"]) == ("Status", code), body
    assert "MetricValueList" not in body.decode()  # never trainer-1's value from `ml`


def test_absolute_form_is_routed_by_its_own_path(two_namespaces: Adapter) -> None:
    target = f"https://127.0.0.1{API}/namespaces/ml/pods/trainer-1/samples_per_second"
    code, body = tls_get(two_namespaces.port, target)
    assert code == 200, body
    items = json.loads(body)["items"]
    assert [(i["describedObject"]["namespace"], i["describedObject"]["name"]) for i in items] == [
        ("ml", "trainer-1")
    ]


@pytest.mark.parametrize(
    "framing",
    [
        "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    ],
)
def test_chunked_with_any_content_length_is_refused_with_a_status(
    two_namespaces: Adapter, framing: str
) -> None:
    raw = socket.create_connection(("127.0.0.1", two_namespaces.port), timeout=30)
    with client_context().wrap_socket(raw) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: x\r\n{framing}\r\n0\r\n\r\n".encode())
        answer = http_fuzz._read_answer(sock, head_request=False)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    status = json.loads(body)
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 400, "BadRequest")
    assert "Transfer-Encoding together with Content-Length" in status["message"]


def test_the_listen_backlog_is_the_one_asked_for(two_namespaces: Adapter) -> None:
    assert listen_backlog(two_namespaces.port) == 1024  # asyncio's default was 100


def test_close_notify_then_half_close_logs_nothing(two_namespaces: Adapter) -> None:
    # (before: one `WARNING asyncio: returning true from eof_received()` per connection)
    for _ in range(20):
        answer = request_then_close_notify(
            two_namespaces.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert answer[:1] == b"\x17", answer[:200]  # answered (a TLS application record)
    assert tls_get(two_namespaces.port, "/healthz")[0] == 200
    assert "eof_received" not in two_namespaces.proc.tail(400_000)


def test_unauthenticated_idle_keep_alive_leaves_room_for_the_front_proxy(
    tmp_path: Path, agents: int, pki: Pki
) -> None:
    """Four times more idle unauthenticated keep-alive connections than the adapter may hold:
    the front proxy's requests and a fresh stranger's are all answered, and idle strangers are
    closed after --unauthenticated-idle-timeout."""
    adapter = launch(
        tmp_path,
        pods(agents, 2),
        "--scrape-interval=1s",
        "--authentication=delegated",
        "--authentication-skip-lookup",
        f"--requestheader-client-ca-file={pki.dir / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--authorization=none",
        "--max-connections=64",
        "--reserved-connections=16",
        "--max-connections-per-peer=1000",
        "--unauthenticated-idle-timeout=2s",
    )
    proxy = client_context(pki.proxy, tmp_path / "proxy")
    alice = {"X-Remote-User": "alice", "X-Remote-Group": "ml"}
    try:
        wait_for(
            lambda: tls_get(adapter.port, QUERY, proxy, alice)[0] == 200,
            timeout_s=60,
            what="a value served",
            interval_s=0.2,
        )
        lone = client_context().wrap_socket(
            socket.create_connection(("127.0.0.1", adapter.port), timeout=60)
        )
        assert exchange(lone, "/healthz")[0] == 200
        with IdleKeepAlive(adapter.port, 256, client_context()) as strangers:
            wait_for(
                lambda: strangers.opened >= 256,
                timeout_s=120,
                what="256 strangers connected",
                interval_s=0.2,
            )
            answers = [tls_get(adapter.port, QUERY, proxy, alice)[0] for _ in range(20)]
            # a proxy connection kept open across the attack keeps working too
            kept = proxy.wrap_socket(
                socket.create_connection(("127.0.0.1", adapter.port), timeout=60)
            )
            kept_answers = [exchange(kept, QUERY, alice)[0] for _ in range(5)]
            fresh = [tls_get(adapter.port, "/healthz")[0] for _ in range(5)]
            kept.close()
            # the strangers find the connections the server closed on their next round (the
            # rounds are slow on a loaded machine: wait for one, do not assume it ran)
            wait_for(
                lambda: strangers.dropped > 0,
                timeout_s=120,
                what="an idle stranger closed by the server",
                interval_s=0.2,
            )
        assert answers == [200] * 20
        assert kept_answers == [200] * 5
        assert fresh == [200] * 5  # a stranger too: it closes one idle longest
        lone.settimeout(60)
        assert lone.recv(1) == b""  # closed by the server, idle or evicted
    finally:
        adapter.proc.stop()


# ----------------------------------------------------------------- issue 37: fairness, memory


def _front_proxied(tmp_path: Path, agents: int, pki: Pki, *args: str) -> Adapter:
    """Front-proxy authentication (no cluster: authorization off), as in a cluster."""
    return launch(
        tmp_path,
        pods(agents, 2),
        "--scrape-interval=1s",
        "--authentication=delegated",
        "--authentication-skip-lookup",
        f"--requestheader-client-ca-file={pki.dir / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--authorization=none",
        *args,
    )


def _served(adapter: Adapter, proxy: ssl.SSLContext) -> None:
    alice = {"X-Remote-User": "alice", "X-Remote-Group": "ml"}
    wait_for(
        lambda: tls_get(adapter.port, QUERY, proxy, alice)[0] == 200,
        timeout_s=60,
        what="a value served",
        interval_s=0.2,
    )


def test_strangers_pipelining_requests_leave_the_front_proxy_and_others_answered(
    tmp_path: Path, agents: int, pki: Pki
) -> None:
    """Four unauthenticated TLS connections write `GET /healthz` 200 at a time (issue 37:
    APIService Available=False, authorised requests timed out); meanwhile the front proxy's
    queries and a fresh stranger's are answered (a generous deadline: answered at all) and
    the flood goes on being answered too."""
    adapter = _front_proxied(tmp_path, agents, pki)
    proxy = client_context(pki.proxy, tmp_path / "proxy")
    alice = {"X-Remote-User": "alice", "X-Remote-Group": "ml"}
    try:
        _served(adapter, proxy)
        with Pipelining(adapter.port, 4) as flood:
            wait_for(
                lambda: flood.answered >= 2000,
                timeout_s=120,
                what="thousands of pipelined requests answered",
                interval_s=0.2,
            )
            answers = [tls_get(adapter.port, QUERY, proxy, alice)[0] for _ in range(10)]
            kept = proxy.wrap_socket(
                socket.create_connection(("127.0.0.1", adapter.port), timeout=30)
            )
            kept_answers = [exchange(kept, QUERY, alice)[0] for _ in range(10)]
            kept.close()
            fresh = [tls_get(adapter.port, "/healthz")[0] for _ in range(3)]
            during = flood.answered
            wait_for(
                lambda: flood.answered > during,
                timeout_s=60,
                what="the flood still answered",
                interval_s=0.2,
            )
        assert answers == [200] * 10
        assert kept_answers == [200] * 10
        assert fresh == [200] * 3
    finally:
        adapter.proc.stop()


def _first_answer(sock: ssl.SSLSocket) -> bytes:
    """What the server sends first (up to its head's end), or b"" when it closes."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_a_body_is_read_and_100_continue_sent_only_after_authentication(
    tmp_path: Path, agents: int, pki: Pki
) -> None:
    adapter = _front_proxied(tmp_path, agents, pki)
    proxy = client_context(pki.proxy, tmp_path / "proxy")
    try:
        _served(adapter, proxy)
        head = (
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            "Expect: 100-continue\r\n{extra}\r\n"
        )
        # a stranger: refused on the head, never invited to send the body
        for path in ("/healthz", QUERY):
            with client_context().wrap_socket(
                socket.create_connection(("127.0.0.1", adapter.port), timeout=30)
            ) as s:
                s.sendall(head.format(method="POST", path=path, extra="").encode())
                first = _first_answer(s)
                assert first.startswith(b"HTTP/1.1 401"), first[:200]
                assert b"Connection: close" in first
        # the front proxy, for an authenticated user: 100 Continue, then the answer
        with proxy.wrap_socket(
            socket.create_connection(("127.0.0.1", adapter.port), timeout=30)
        ) as s:
            extra = "X-Remote-User: alice\r\nX-Remote-Group: ml\r\n"
            s.sendall(head.format(method="GET", path=QUERY, extra=extra).encode())
            first = _first_answer(s)
            assert first.startswith(b"HTTP/1.1 100"), first[:200]
            s.sendall(b"hello")
            final = _first_answer(s)
            assert final.startswith(b"HTTP/1.1 200"), final[:200]
        # slow bodies from fifty addresses: each refused before its body, none invited
        with SlowBodies(adapter.port, 50, sources=loopback_sources(50), every=0.5) as bodies:
            wait_for(
                lambda: bodies.refusals >= 50,
                timeout_s=120,
                what="fifty slow bodies refused",
                interval_s=0.2,
            )
        assert bodies.continues == 0
        assert tls_get(adapter.port, QUERY, proxy, {"X-Remote-User": "alice"})[0] == 200
    finally:
        adapter.proc.stop()


def test_memory_stays_under_its_budget_with_1500_half_open_handshakes(
    tmp_path: Path, agents: int, pki: Pki
) -> None:
    """Half-open ClientHellos from eight addresses (issue 37: 242 -> 619 MB against a 512 MiB
    limit) on an adapter whose budget leaves room for a few hundred connections: its RSS
    stays under 80 % of the budget, and the front proxy's kept-alive connection (the
    aggregator keeps its own) is answered throughout. (A new connection may be refused while
    the budget is full: its privilege is known only after its handshake.)"""
    (tmp_path / "probe").mkdir()
    (tmp_path / "budget").mkdir()
    probe = _front_proxied(tmp_path / "probe", agents, pki)
    try:
        settled = _rss_mb(probe.proc) * 1e6
    finally:
        probe.proc.stop()
    budget = int(settled / 0.45)  # the process at 45 %, admission stops at 70 %
    adapter = _front_proxied(
        tmp_path / "budget", agents, pki, f"--memory-budget={budget}", "--tls-handshake-timeout=30s"
    )
    proxy = client_context(pki.proxy, tmp_path / "proxy")
    alice = {"X-Remote-User": "alice", "X-Remote-Group": "ml"}
    peak = [0.0]
    stop = threading.Event()

    def watch() -> None:
        for _ in range(100_000):
            peak[0] = max(peak[0], _rss_mb(adapter.proc) * 1e6)
            if stop.wait(0.1):
                return

    watcher = threading.Thread(target=watch)
    try:
        _served(adapter, proxy)
        kept = proxy.wrap_socket(socket.create_connection(("127.0.0.1", adapter.port), timeout=60))
        assert exchange(kept, QUERY, alice)[0] == 200
        watcher.start()
        with HalfOpenConnections(
            adapter.port, partial=1500, idle=0, sources=loopback_sources(8)
        ) as hellos:
            wait_for(
                lambda: len(hellos.socks) == 1500,
                timeout_s=300,
                what="1,500 half-open handshakes sent",
                interval_s=0.5,
            )
            answers = [exchange(kept, QUERY, alice)[0] for _ in range(10)]
            wait_for(
                lambda: hellos.dropped > 0,
                timeout_s=120,
                what="half-open handshakes closed for room",
                interval_s=0.2,
            )
        stop.set()
        watcher.join(10)
    finally:
        stop.set()
        adapter.proc.stop()
    print(
        f"\nbudget {budget / 1e6:.0f} MB (idle adapter {settled / 1e6:.0f} MB): "
        f"peak {peak[0] / 1e6:.0f} MB, dropped {hellos.dropped}"
    )
    assert answers == [200] * 10
    assert peak[0] <= 0.8 * budget
    assert "memory" in adapter.proc.tail(200_000)  # the refusals' warning names it
