"""The HTTP endpoint on loopback: /metrics, /healthz, /readyz, and a port that is taken."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.app import create_registry
from agent.errors import ExporterError
from agent.exporter import MetricsServer
from agent.protocol.world import TrainerWorld
from agent.readiness import Readiness


class StubTrainer:
    world = TrainerWorld(rank=1, world_size=2, generation=4)
    pid: int | None = None
    starts = 0


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
