"""The generation rendezvous: everyone present before a group forms, over a fresh store."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Iterator

import pytest

from agent.errors import ConfigError
from agent.protocol.errors import RendezvousTimeout
from agent.trainer.elastic import ElasticTrainerSettings
from agent.trainer.rendezvous import FRESH_SECONDS, RendezvousHost, Superseded, ask, meet
from tests.support.net import bound, free_port
from tests.support.waiting import wait_for


def free_endpoint() -> str:
    return f"127.0.0.1:{free_port()}"


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
        first = h.open(4, 2)
        assert h.answer("edl-rendezvous 4 1") == f"ok {first}"
        second = h.open(5, 3)
        assert h.answer("edl-rendezvous 5 1").startswith("wait")
        clock[0] += FRESH_SECONDS + 0.5  # rank 1 stopped polling (it followed a newer world)
        assert h.answer("edl-rendezvous 5 2") == "wait"
        assert not h.complete(5)
        assert h.answer("edl-rendezvous 5 1") == f"ok {second}"  # back, both fresh: complete
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
    store = host.open(2, 2)
    assert host.complete(2) is False
    assert host.answer("edl-rendezvous 2 1") == f"ok {store}"  # complete, but not sent yet
    assert host.complete(2) and not host.everyone_told(2)
    assert ask(host.endpoint, 2, 1) == f"ok {store}"
    wait_for(lambda: host.everyone_told(2), timeout_s=30, what="everyone told", interval_s=0.01)


def test_the_store_port_is_held_on_every_address_until_rank_0s_store_binds_it(
    host: RendezvousHost,
) -> None:
    """Paddle's store binds 0.0.0.0 and aborts the process when it cannot: from the moment
    the meeting opens nothing else may take its port, on any address."""
    store = host.open(3, 2)
    port = int(store.rpartition(":")[2])
    for address, reuse in (("127.0.0.2", False), ("127.0.0.1", True), ("0.0.0.0", True)):
        with pytest.raises(OSError) as refused:
            bound(address, port, reuse=reuse, listen=True).close()
        assert refused.value.errno == errno.EADDRINUSE, (address, reuse)
    host.lend(3)  # what `meet` does once everyone was told: rank 0 creates its store next
    framework_store = bound("0.0.0.0", port, reuse=True, listen=True)  # as libuv binds it
    try:
        with pytest.raises(OSError):  # the store listens: still nobody else
            bound("127.0.0.2", port).close()
        host.open(4, 2)  # the host lets go of generation 3's port; the store keeps it
        with pytest.raises(OSError):
            bound("127.0.0.2", port).close()
    finally:
        framework_store.close()
    bound("127.0.0.2", port).close()  # the store gone too: the port is free again


def held_elsewhere(count: int) -> tuple[range, list[socket.socket]]:
    """A band of `count` + 1 ports, all but its last bound by a listener on 127.0.0.2."""
    for _ in range(50):
        start = free_port()
        band = range(start, start + count + 1)
        held: list[socket.socket] = []
        try:
            held = [bound("127.0.0.2", p, listen=True) for p in band[:-1]]
            bound("0.0.0.0", band[-1]).close()
        except OSError:
            for s in held:
                s.close()
            continue
        return band, held
    raise RuntimeError("no band of free ports found")


def test_store_ports_taken_on_another_address_are_skipped() -> None:
    band, held = held_elsewhere(6)
    h = RendezvousHost(free_endpoint(), store_ports=band)
    try:
        store = h.open(1, 2)
        assert store == f"127.0.0.1:{band[-1]}"  # the one port free on every address
        with pytest.raises(RendezvousTimeout, match="no port for its store"):
            meet(h.endpoint, 2, 0, 2, 5, never, h)  # the last one is held for generation 1
    finally:
        h.close()
        for s in held:
            s.close()


def test_the_trainer_reads_its_store_ports_from_the_environment() -> None:
    assert ElasticTrainerSettings.from_env({}).store_ports is None  # the kernel's choice
    settings = ElasticTrainerSettings.from_env({"EDL_STORE_PORTS": "24000-24009"})
    assert settings.store_ports == range(24000, 24010)
    with pytest.raises(ConfigError, match="EDL_STORE_PORTS='24000-': expected LOW-HIGH"):
        ElasticTrainerSettings.from_env({"EDL_STORE_PORTS": "24000-"})
