"""The generation rendezvous: everyone present before a group forms, over a fresh store."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from agent.protocol.errors import RendezvousTimeout
from agent.trainer.rendezvous import FRESH_SECONDS, RendezvousHost, Superseded, ask, meet
from tests.support.waiting import wait_for


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def host() -> Iterator[RendezvousHost]:
    h = RendezvousHost(free_endpoint())
    yield h
    h.close()


def never() -> bool:
    return False


def listen_on(endpoint: str) -> socket.socket:
    """Stands in for rank 0's framework store once it exists."""
    host, _, port = endpoint.rpartition(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen(8)
    return s


def test_the_group_waits_for_every_rank_then_all_get_one_fresh_store(
    host: RendezvousHost,
) -> None:
    results: dict[int, str] = {}

    def rank(r: int) -> None:
        results[r] = meet(host.endpoint, 7, r, 3, 30, never)

    clients = [threading.Thread(target=rank, args=(r,)) for r in (1, 2)]
    clients[0].start()
    assert ask(host.endpoint, 7, 1) == "wait"  # rank 2 is not there yet (nor rank 0's meeting)
    assert clients[0].is_alive()  # rank 1 waits for them
    rank0: dict[str, str] = {}
    server = threading.Thread(
        target=lambda: rank0.update(store=meet(host.endpoint, 7, 0, 3, 30, never, host))
    )
    server.start()
    clients[1].start()
    server.join(10)
    assert rank0["store"] and rank0["store"] != host.endpoint  # a fresh port, not the master's
    store = listen_on(rank0["store"])  # rank 0 creates its store only once all were told
    try:
        for c in clients:
            c.join(10)
        assert results == {1: rank0["store"], 2: rank0["store"]}
    finally:
        store.close()
    second = meet(host.endpoint, 9, 0, 1, 5, never, host)
    assert second != rank0["store"]  # every group gets its own store
    assert ask(host.endpoint, 7, 1) == "gone"  # the host moved past generation 7


def test_a_rank_that_gave_up_does_not_count() -> None:
    clock = [100.0]
    h = RendezvousHost(free_endpoint(), clock=lambda: clock[0])
    try:
        h.open(4, 2, "127.0.0.1:1")
        assert h.answer("edl-rendezvous 4 1") == "ok 127.0.0.1:1"
        h.open(5, 3, "127.0.0.1:2")
        assert h.answer("edl-rendezvous 5 1").startswith("wait")
        clock[0] += FRESH_SECONDS + 0.5  # rank 1 stopped polling (it followed a newer world)
        assert h.answer("edl-rendezvous 5 2") == "wait"
        assert not h.complete(5)
        assert h.answer("edl-rendezvous 5 1") == "ok 127.0.0.1:2"  # back, both fresh: complete
        assert h.complete(5)
        assert h.answer("edl-rendezvous 4 1") == "gone"
        assert h.answer("edl-rendezvous 6 1") == "wait"  # not opened yet
        for bad in ("", "hello", "edl-rendezvous x 1", "edl-rendezvous 5 9"):
            assert h.answer(bad) == "error"
    finally:
        h.close()


def test_waiting_gives_up_on_a_newer_world_and_times_out(host: RendezvousHost) -> None:
    newer = threading.Event()
    threading.Timer(0.3, newer.set).start()
    with pytest.raises(Superseded):  # not RendezvousTimeout: the newer world ends the wait
        meet(host.endpoint, 3, 1, 2, 30, newer.is_set)
    with pytest.raises(RendezvousTimeout, match="not every rank"):
        meet(free_endpoint(), 3, 1, 2, 0.5, never)  # nobody listens at all
    with pytest.raises(RendezvousTimeout):
        meet(host.endpoint, 3, 0, 2, 0.5, never, host)  # rank 1 never comes


def test_rank_zero_forms_only_after_every_rank_was_told(host: RendezvousHost) -> None:
    host.open(2, 2, "127.0.0.1:9")
    assert host.complete(2) is False
    assert host.answer("edl-rendezvous 2 1") == "ok 127.0.0.1:9"  # complete, but not sent yet
    assert host.complete(2) and not host.everyone_told(2)
    assert ask(host.endpoint, 2, 1) == "ok 127.0.0.1:9"
    wait_for(lambda: host.everyone_told(2), timeout_s=30, what="everyone told", interval_s=0.01)
