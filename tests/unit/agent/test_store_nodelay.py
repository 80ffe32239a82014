"""TCP_NODELAY on the store's connections, and on nothing else (real sockets on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.trainer.frameworks.paddle.store_nodelay import StoreNoDelay
from tests.support.net import free_port
from tests.support.waiting import wait_for


def nodelay(sock: socket.socket) -> bool:
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


@contextlib.contextmanager
def connection() -> Iterator[tuple[socket.socket, socket.socket, socket.socket, int]]:
    """A listener on a free port, a client connected to it, and the accepted end."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = int(listener.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            with accepted:
                yield listener, client, accepted, port


def test_the_store_port_s_connections_get_it_other_ports_keep_nagle() -> None:
    with connection() as (listener, client, accepted, port), connection() as other:
        assert not any(nodelay(s) for s in (listener, client, accepted, *other[:3]))
        tuner = StoreNoDelay(port)
        assert tuner.sweep() == 3  # the listener, the client's end and the server's end
        assert all(nodelay(s) for s in (listener, client, accepted))
        assert not any(nodelay(s) for s in other[:3])
        assert tuner.sweep() == 0  # each socket once
        client.sendall(b"still ours")  # the fds it looked at through are still open
        assert accepted.recv(16) == b"still ours"


def test_a_connection_made_inside_the_block_is_tuned_before_it_ends() -> None:
    """Paddle opens its sockets inside the block: the sweeps catch them while it runs."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = int(listener.getsockname()[1])
        seen: list[bool] = []
        with StoreNoDelay(port) as tuner:
            with socket.create_connection(("127.0.0.1", port)) as client:
                wait_for(lambda: nodelay(client), timeout_s=30, what="a sweep", interval_s=0.001)
                seen.append(nodelay(client))
                accepted, _ = listener.accept()
                with accepted:
                    seen.append(nodelay(accepted))  # accepted from a tuned listener
        assert seen == [True, True] and tuner.tuned >= 2  # the accepted end may be seen too


def test_no_proc_nothing_changes(tmp_path: Path) -> None:
    with connection() as (_, client, _accepted, port):
        tuner = StoreNoDelay(port, fd_dir=tmp_path / "missing")
        with tuner:
            pass
        assert tuner.tuned == 0 and not nodelay(client)


@pytest.mark.slow
def test_paddle_s_own_store_gets_it() -> None:
    """The real TCPStore: its server's listener and its client connection are tuned."""
    core = pytest.importorskip("paddle.base.core")
    port = free_port()
    with StoreNoDelay(port) as tuner:
        store = core.TCPStore("127.0.0.1", port, True, 1, 10)
        store.set("k", "v")
        assert bytes(store.get("k")) == b"v"
    assert tuner.tuned >= 2  # the listener and the client's end (the accepted end inherits)
