"""Ports checked on every address and held until their server binds them (`edl_common.ports`)."""

from __future__ import annotations

import errno
import random
import socket
from pathlib import Path

import pytest

from edl_common.ports import (
    Band,
    NoFreePort,
    ephemeral_low,
    free_static_port,
    hold_port,
    parse_port_range,
    static_band,
)
from tests.support.net import bound, free_port


def test_bands_lie_below_the_ephemeral_range_and_apart(tmp_path: Path) -> None:
    proc = tmp_path / "ip_local_port_range"
    proc.write_text("32768\t60999\n")
    low = ephemeral_low(proc)
    assert low == 32768
    server, member = static_band(Band.SERVER, low), static_band(Band.MEMBER, low)
    assert (server.start, server.stop, member.start, member.stop) == (20768, 26768, 26768, 32768)
    assert 29543 in member and 29544 in member  # the Kubernetes default member ports
    assert static_band(Band.SERVER, 5000).start == 1024  # never a privileged port
    (tmp_path / "broken").write_text("nonsense")
    assert ephemeral_low(tmp_path / "broken") == ephemeral_low(tmp_path / "missing") == 32768


def test_a_held_port_is_refused_to_everyone_until_shared() -> None:
    with hold_port() as held:  # the kernel's choice: free on every address
        for address, reuse in (("127.0.0.2", False), ("127.0.0.1", True), ("0.0.0.0", True)):
            with pytest.raises(OSError) as refused:
                bound(address, held.port, reuse=reuse).close()
            assert refused.value.errno == errno.EADDRINUSE
        held.share()
        store = bound("0.0.0.0", held.port, reuse=True, listen=True)  # as a TCPStore binds
        try:
            with socket.create_connection(("127.0.0.1", held.port), timeout=5):
                pass  # the store, not the holder, answers
        finally:
            store.close()
    assert held.closed
    bound("127.0.0.2", held.port).close()  # let go of


def test_ports_in_use_on_another_address_are_skipped() -> None:
    for _ in range(50):
        start = free_port()
        taken: list[socket.socket] = []
        try:
            taken = [bound("127.0.0.2", p, listen=True) for p in (start, start + 1)]
            bound("0.0.0.0", start + 2).close()
        except OSError:
            for s in taken:
                s.close()
            continue
        break
    else:
        pytest.fail("no two adjacent free ports")
    try:
        rng = random.Random(1)
        with hold_port(range(start, start + 3), rng=rng) as held:
            assert held.port == start + 2  # free on 127.0.0.1, but only this one everywhere
        with pytest.raises(NoFreePort, match="2 of ports"):
            hold_port(range(start, start + 2))
    finally:
        for s in taken:
            s.close()


def test_free_static_port_is_in_its_band_and_free_everywhere() -> None:
    port = free_static_port(Band.SERVER, random.Random(7))
    assert port in static_band(Band.SERVER)
    bound("0.0.0.0", port).close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("24000-24009", range(24000, 24010)), (" 7000 ", range(7000, 7001)), ("1-1", range(1, 2))],
)
def test_port_ranges(text: str, expected: range) -> None:
    assert parse_port_range(text) == expected


@pytest.mark.parametrize("text", ["", "x", "10-", "-5", "9-3", "0-10", "60000-70000"])
def test_bad_port_ranges_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        parse_port_range(text)
