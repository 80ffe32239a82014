"""A real `edl-agent run`'s exporter reads the request line and framing as RFC 9112 does.

Issue 25's path confusion and TE+CL cases, on the agent's front end (the adapter's are in
tests/integration/metrics_adapter/test_adapter_hardening.py): a path that contains `://` is
origin-form and is not `/metrics` (a 404, never the exposition), absolute-form is routed by
its own path, and `Transfer-Encoding: chunked` beside any `Content-Length` is a 400 followed
by a close, whichever header comes first.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support.local_agents import LocalAgent, idle_agent

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAgent]:
    with idle_agent(tmp_path_factory.mktemp("exporter-framing")) as started:
        yield started


def exchange(port: int, data: bytes) -> bytes:
    """Sends `data` on a new connection and reads until the exporter closes it (bounded)."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        for _ in range(10_000):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return got


def get(target: str, extra: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n".encode()


@pytest.mark.parametrize(
    "target",
    [
        "/x://h/metrics",
        "/a/http://h/metrics",
        "/https://h/metrics",
        "//h/metrics",
        "/healthz/http://h/metrics",
    ],
)
def test_an_origin_form_path_with_a_scheme_inside_is_not_re_read(
    agent: LocalAgent, target: str
) -> None:
    answer = exchange(agent.port, get(target))
    assert answer.startswith(b"HTTP/1.1 404 "), answer[:200]
    assert b"edl_trainer_up" not in answer  # never the exposition of the path inside


def test_absolute_form_is_routed_by_its_own_path(agent: LocalAgent) -> None:
    answer = exchange(agent.port, get("http://127.0.0.1/metrics"))
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert b"edl_trainer_up" in answer
    answer = exchange(agent.port, get("http://127.0.0.1/a://h/metrics"))
    assert answer.startswith(b"HTTP/1.1 404 "), answer[:200]


@pytest.mark.parametrize(
    "framing",
    [
        "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    ],
)
def test_chunked_with_any_content_length_is_refused_then_closed(
    agent: LocalAgent, framing: str
) -> None:
    # a second, well-formed request after the chunked body: smuggled if the framing passed
    first = f"GET /healthz HTTP/1.1\r\nHost: x\r\n{framing}\r\n0\r\n\r\n".encode()
    answer = exchange(agent.port, first + get("/metrics"))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"Transfer-Encoding together with Content-Length" in body, body
    assert answer.count(b"HTTP/1.1 ") == 1  # closed: the request behind it is never answered
    assert b"edl_trainer_up" not in answer
