"""`listen_backlog` reads what the kernel holds for a listener, with no tool installed."""

from __future__ import annotations

import socket

import pytest

from tests.support.net import listen_backlog

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
)
def test_the_backlog_a_listener_asked_for(family: int, host: str) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        s.listen(77)
        assert listen_backlog(s.getsockname()[1]) == 77


def test_a_port_nobody_listens_on_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening
        with pytest.raises(RuntimeError, match="0 TCP listeners"):
            listen_backlog(s.getsockname()[1])
