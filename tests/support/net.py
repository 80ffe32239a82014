"""Loopback ports for the processes a test starts.

A port is taken from the band of server ports below the kernel's ephemeral range and checked
on every address (`edl_common.ports`): other suites on the machine hold thousands of sockets on
127.0.0.0/8 (`socket_holder.py`), and a port free on 127.0.0.1 alone may be held on another
address, where a server binding 0.0.0.0 then fails; nor can an outgoing connection be given it
between the check and the server's bind.
"""

from __future__ import annotations

import socket
import struct

from edl_common.ports import Band, free_static_port

_used_ports: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on every address now (so on `host`), never handed out twice in this
    process. `host` picks the family (a literal with a colon: IPv6)."""
    for _ in range(50):
        port = free_static_port(Band.SERVER, host="::" if ":" in host else "0.0.0.0")
        if port not in _used_ports:
            _used_ports.add(port)
            return port
    raise RuntimeError("no free port found after 50 tries")


def bound(address: str, port: int, reuse: bool = False, listen: bool = False) -> socket.socket:
    """A TCP socket bound to (`address`, `port`), listening if asked (OSError when taken).

    `reuse` sets SO_REUSEADDR first, as a framework's store (libuv) does.
    """
    s = socket.socket()
    try:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
        if listen:
            s.listen(8)
    except OSError:
        s.close()
        raise
    return s


_SOCK_DIAG = 4  # NETLINK_SOCK_DIAG
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST_DUMP = 0x301
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCP_LISTEN = 10
_NLMSG = struct.Struct("=LHHLL")  # nlmsghdr: length, type, flags, sequence, port id
_SOCKID_BYTES = 48  # inet_diag_sockid: ports, addresses, interface, cookie


def listen_backlog(port: int, host: str | None = None) -> int:
    """The backlog of the TCP socket listening on `port`, as the kernel holds it.

    What `ss -ltn` shows as a listener's Send-Q (`sk_max_ack_backlog`), read from the
    kernel's sock_diag netlink interface (Linux): no iproute2 needed. `/proc/net/tcp` does
    not show it (its tx_queue of a listener is 0). With `host`, only the listeners on that
    address or on its family's wildcard count: on a crowded machine another process may
    listen on the same port number on another loopback address.
    """
    wanted: set[bytes] | None = None
    if host is not None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        wildcard = "::" if family == socket.AF_INET6 else "0.0.0.0"
        wanted = {socket.inet_pton(family, a) for a in (host, wildcard)}
    found: list[int] = []
    for family in (socket.AF_INET, socket.AF_INET6):
        found += [
            q
            for sport, address, q in _listeners(family)
            if sport == port and (wanted is None or address in wanted)
        ]
    if len(found) != 1:
        where = f"{host}:{port}" if host else f"port {port}"
        raise RuntimeError(f"{len(found)} TCP listeners on {where} (one expected)")
    return found[0]


def _listeners(family: int) -> list[tuple[int, bytes, int]]:
    """(port, address, backlog) of every TCP listener of `family` (an inet_diag dump)."""
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN)
    request += bytes(_SOCKID_BYTES)
    head = _NLMSG.pack(_NLMSG.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST_DUMP, 1, 0)
    out: list[tuple[int, bytes, int]] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG) as nl:
        nl.settimeout(10)
        nl.sendall(head + request)
        for _ in range(100_000):  # bounded: one datagram of answers per round
            data = nl.recv(1 << 16)
            offset = 0
            while offset + _NLMSG.size <= len(data):
                length, kind, _, _, _ = _NLMSG.unpack_from(data, offset)
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR or length < _NLMSG.size:
                    raise OSError(f"sock_diag answered message type {kind}")
                body = offset + _NLMSG.size
                # inet_diag_msg: family, state, timer, retrans, sockid (source port first,
                # big-endian, then the destination port, then the source address: 16 bytes,
                # an IPv4 one in the first 4), expires, rqueue, wqueue (a listener's: its backlog)
                (sport,) = struct.unpack_from(">H", data, body + 4)
                size = 16 if family == socket.AF_INET6 else 4
                address = bytes(data[body + 8 : body + 8 + size])
                (wqueue,) = struct.unpack_from("=I", data, body + 4 + _SOCKID_BYTES + 8)
                out.append((sport, address, wqueue))
                offset += (length + 3) & ~3
    raise OSError("sock_diag dump did not end")
