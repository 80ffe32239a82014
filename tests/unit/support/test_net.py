"""`listen_backlog` reads what the kernel holds for a listener, with no tool installed."""

from __future__ import annotations

import socket

import pytest

from tests.support.net import free_port, listen_backlog

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
)
def test_the_backlog_a_listener_asked_for(family: int, host: str) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        s.listen(77)
        assert listen_backlog(s.getsockname()[1]) == 77
        assert listen_backlog(s.getsockname()[1], host) == 77


def test_a_port_nobody_listens_on_here_is_an_error() -> None:
    # On a crowded machine another process may listen on the same port number on another
    # loopback address (port 0 gives an ephemeral one): only 127.0.0.1 and 0.0.0.0 count.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening
        with pytest.raises(RuntimeError, match=r"0 TCP listeners on 127\.0\.0\.1:"):
            listen_backlog(s.getsockname()[1], "127.0.0.1")


def test_a_listener_on_another_address_is_not_the_one_asked_about() -> None:
    port = free_port()  # free on every address, so on both
    with socket.socket() as other, socket.socket() as mine:
        other.bind(("127.0.0.3", port))
        other.listen(5)
        mine.bind(("127.0.0.1", port))
        mine.listen(9)
        assert listen_backlog(port, "127.0.0.1") == 9
        assert listen_backlog(port, "127.0.0.3") == 5
        with pytest.raises(RuntimeError, match="2 TCP listeners on port"):
            listen_backlog(port)
