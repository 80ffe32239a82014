"""The HTTP endpoint on loopback: /metrics, /healthz, /readyz, and a port that is taken."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.errors import ExporterError
from agent.process.app import create_registry
from agent.process.exporter import ExporterLimits, MetricsServer
from agent.process.readiness import Readiness
from tests.support.waiting import wait_for
from tests.unit.agent.helpers import StubTrainer


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


@pytest.fixture
def verdict() -> list[Readiness]:
    return [Readiness(False, "trainer not started")]


@pytest.fixture
def server(tmp_path: Path, verdict: list[Readiness]) -> Iterator[MetricsServer]:
    registry = create_registry(tmp_path, StubTrainer(), None)
    srv = MetricsServer(registry, lambda: verdict[0], "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.close()


def test_metrics_are_served_in_the_prometheus_text_format(server: MetricsServer) -> None:
    code, ctype, body = get(f"http://127.0.0.1:{server.port}/metrics")
    assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
    lines = body.splitlines()
    assert "edl_trainer_world_size 2.0" in lines
    assert "edl_trainer_rank 1.0" in lines
    assert "edl_trainer_generation 4.0" in lines
    assert "edl_trainer_up 0.0" in lines
    assert "edl_gpu_devices 0.0" in lines
    assert 'edl_agent_collector_errors_total{collector="trainer_reports"} 0.0' in lines


def test_openmetrics_is_negotiated(server: MetricsServer) -> None:
    code, ctype, body = get(
        f"http://127.0.0.1:{server.port}/metrics",
        {"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    assert code == 200 and ctype.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n")


def test_health_and_readiness_say_why(server: MetricsServer, verdict: list[Readiness]) -> None:
    base = f"http://127.0.0.1:{server.port}"
    assert get(base + "/healthz")[0] == 200
    assert get(base + "/readyz")[::2] == (503, "not ready: trainer not started\n")
    verdict[0] = Readiness(True, "trainer running")
    assert get(base + "/readyz")[::2] == (200, "ready: trainer running\n")
    assert get(base + "/nope")[0] == 404


def test_a_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        srv = MetricsServer(
            create_registry(tmp_path, StubTrainer(), None),
            lambda: Readiness(True, ""),
            "127.0.0.1",
            port,
        )
        with pytest.raises(ExporterError, match=f"port {port} on 127.0.0.1 is already in use"):
            srv.start()


def test_close_releases_the_port(server: MetricsServer) -> None:
    port = server.port
    server.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def raw(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes (bounded)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_head_and_leading_empty_lines_are_served(server: MetricsServer) -> None:
    head = raw(server.port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert length > 0 and head.endswith(b"\r\n\r\n")  # headers of a GET, no body
    crlf = raw(
        server.port, b"\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert crlf.startswith(b"HTTP/1.1 200") and crlf.endswith(b"ok\n")
    post = raw(server.port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert post.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in post
    assert raw(server.port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_slow_and_idle_clients_are_cut_off_without_blocking_scrapes(tmp_path: Path) -> None:
    limits = ExporterLimits(read_timeout=0.5, idle_timeout=1.0, max_connections=50)
    srv = MetricsServer(
        create_registry(tmp_path, StubTrainer(), None),
        lambda: Readiness(True, ""),
        "127.0.0.1",
        0,
        limits,
    )
    srv.start()
    try:
        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(40)]
        slow = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost")  # never finishes its head
        for _ in range(5):  # scrapes keep answering while the connections are held
            assert get(f"http://127.0.0.1:{srv.port}/metrics")[0] == 200
        assert slow.recv(4096).startswith(b"HTTP/1.1 408")  # after read_timeout
        for s in idle:  # idle ones are closed by the server after idle_timeout
            assert s.recv(1) == b""
        over = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(60)]
        # beyond max_connections a newcomer closes the one idle longest: a scrape still gets in
        assert get(f"http://127.0.0.1:{srv.port}/metrics")[0] == 200
        front = srv.front
        assert front is not None
        wait_for(
            lambda: front.open_connections <= 50 and front.evicted_connections >= 10,
            timeout_s=30,
            what="at most 50 open, the oldest idle ones closed",
            interval_s=0.1,
        )
        closed = 0
        for s in over:
            try:
                closed += s.recv(1) == b""
            except ConnectionResetError:
                closed += 1
            if closed >= 10:
                break
        assert closed >= 10  # the client sees them closed
        for s in [*idle, *over, slow]:
            s.close()
    finally:
        srv.close()


def test_a_client_hanging_up_mid_answer_is_not_an_error(
    server: MetricsServer, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST
    assert get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
