"""Trace loading from CSV, JSON and a Prometheus HTTP API (a stub server on loopback)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from edl_sim.hpa.errors import TraceError
from edl_sim.hpa.trace import (
    PrometheusQuery,
    load_csv,
    load_json,
    load_prometheus,
    load_trace,
)


def test_csv_per_pod_and_per_object(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "time_seconds,metric,pod,object,value\n"
        "0,m,a,,1\n0,m,b,,2\n30,m,a,,3\n"
        "0,queue,,deployment/x,10\n60,queue,,deployment/x,20\n"
    )
    trace = load_csv(path)
    assert trace.metrics == {"m", "queue"}
    assert trace.pod_values("m", 15) == {"a": Decimal(1), "b": Decimal(2)}
    assert trace.pod_values("m", 30) == {"a": Decimal(3), "b": Decimal(2)}  # sample-and-hold
    assert trace.total("m", 45) == Decimal(5)
    assert trace.object_values("queue", 59.9) == [Decimal(10)]
    assert trace.total("queue", 60) == Decimal(20)
    assert (trace.start, trace.end) == (0.0, 60.0)


def test_csv_missing_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time_seconds,metric,pod\n0,m,a\n")
    with pytest.raises(TraceError, match="missing column\\(s\\): value"):
        load_csv(path)
    path.write_text("time_seconds,metric,value\n0,m,1\n")
    with pytest.raises(TraceError, match="pod or object"):
        load_csv(path)


def test_csv_bad_value_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time_seconds,metric,pod,value\n0,m,a,1\n15,m,a,lots\n")
    with pytest.raises(TraceError, match=r"t\.csv:3 value"):
        load_csv(path)


def test_json_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps({"samples": [{"time_seconds": 0, "metric": "m", "object": "o", "value": 4.5}]})
    )
    assert load_trace(path).total("m", 0) == Decimal("4.5")
    path.write_text("[{]")
    with pytest.raises(TraceError, match="bad JSON"):
        load_json(path)


class _Prometheus(BaseHTTPRequestHandler):
    seen: list[dict[str, list[str]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        params = parse_qs(url.query)
        _Prometheus.seen.append(params)
        if url.path != "/api/v1/query_range":
            self.send_response(404)
            self.end_headers()
            return
        body: dict[str, Any]
        if params["query"][0] == "bad(":
            self.send_response(400)
            body = {"status": "error", "errorType": "bad_data", "error": "parse error"}
        else:
            self.send_response(200)
            start = float(params["start"][0])
            body = {
                "status": "success",
                "data": {
                    "resultType": "matrix",
                    "result": [
                        {
                            "metric": {"__name__": "gpu_utilization", "pod": "p0"},
                            "values": [[start, "0.5"], [start + 15, "0.7"]],
                        },
                        {
                            "metric": {"__name__": "gpu_utilization", "pod": "p1"},
                            "values": [[start, "0.25"]],
                        },
                    ],
                },
            }
        data = json.dumps(body).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_prometheus_range_query(prometheus: str) -> None:
    trace = load_prometheus(PrometheusQuery(prometheus, "avg by (pod) (x)", 1000.0, 1030.0, 15.0))
    assert _Prometheus.seen[-1]["step"] == ["15.0"]
    assert trace.pod_values("gpu_utilization", 0) == {"p0": Decimal("0.5"), "p1": Decimal("0.25")}
    assert trace.pod_values("gpu_utilization", 15) == {"p0": Decimal("0.7"), "p1": Decimal("0.25")}


def test_prometheus_error_is_one_line(prometheus: str) -> None:
    with pytest.raises(TraceError, match="parse error"):
        load_prometheus(PrometheusQuery(prometheus, "bad(", 0.0, 10.0, 5.0))


def test_prometheus_unreachable() -> None:
    with pytest.raises(TraceError, match="did not answer"):
        load_prometheus(PrometheusQuery("http://127.0.0.1:9", "x", 0.0, 10.0, 5.0, timeout=2))
