"""TCP ports that stay free: checked on every address, and held until their server binds them.

Why: a port found free on one address (binding ``127.0.0.1:0``) may be in use on another (a
listener on 127.0.5.1, a connection bound there, any socket of a hostNetwork pod's node), and
a server that then binds the wildcard address fails. Paddle's and torch's TCPStore bind
``0.0.0.0``; Paddle 3.3.1's (libuv) store *aborts the process* (SIGABRT, exit 134) when that
bind fails, so the failure cannot even be caught and retried. Two rules follow:

- A port is checked by binding the **wildcard** address (`wildcard`), never one address: the
  bind succeeds only when no socket of any address holds the port.
- A port handed to a framework's store is **held** (`HeldPort`) from the moment it is chosen
  until the store has bound it: bound on the wildcard without ``SO_REUSEADDR``, so no other
  socket can bind it on any address, nor can an outgoing connection be given it (Linux skips
  explicitly bound ports when it picks one for ``connect``). Just before the store binds,
  `HeldPort.share` turns ``SO_REUSEADDR`` on: the store (libuv, Paddle's and torch's alike,
  sets it too) may then bind and listen beside the holder, which never listens (Linux lets two
  ``SO_REUSEADDR`` sockets share a port while at most one of them listens). There is no moment
  at which the port is free for a stranger to take.

Ports EDL picks for servers of its own (a member's rendezvous port with
``EDL_TRAINER_PORTS=auto``, the test harness's servers) come from a band *below* the kernel's
ephemeral range (`static_band`): no outgoing connection is ever given one between the check
and the bind. The two uses get disjoint halves, so a test server never takes a member port that
happens not to listen at that moment.
"""

from __future__ import annotations

import enum
import errno
import random
import socket
from pathlib import Path
from types import TracebackType

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""Linux's range of ports given to ``bind(0)`` and ``connect``."""
DEFAULT_EPHEMERAL_LOW = 32768
"""Linux's default low end, used where the range cannot be read."""
STATIC_SPAN = 12000
"""How far below the ephemeral range EDL's static ports go (never below 1024)."""
ATTEMPTS = 200
"""Random ports tried in a band before giving up (each try is one failed bind)."""


class NoFreePort(OSError):
    """No port of the band could be bound on every address (the last bind error is the cause)."""


class Band(enum.Enum):
    """Which half of the static ports below the ephemeral range."""

    SERVER = "server"
    """Lower half: servers a test or a tool starts (`tests.support.net.free_port`)."""
    MEMBER = "member"
    """Upper half: members' rendezvous ports (``EDL_TRAINER_PORTS=auto``); it holds the
    Kubernetes defaults 29543 and 29544 under Linux's default range."""


def ephemeral_low(path: Path = EPHEMERAL_RANGE) -> int:
    """The low end of the kernel's ephemeral port range (the default where unreadable)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def static_band(band: Band, low: int | None = None) -> range:
    """Ports of `band`: a half of the `STATIC_SPAN` ports below the ephemeral range."""
    top = ephemeral_low() if low is None else low
    bottom = max(1024, top - STATIC_SPAN)
    middle = (bottom + top) // 2
    return range(bottom, middle) if band is Band.SERVER else range(middle, top)


def wildcard(host: str) -> tuple[socket.AddressFamily, str]:
    """The family and wildcard address covering `host` (IPv6 for a literal with a colon)."""
    if ":" in host:
        return socket.AF_INET6, "::"
    return socket.AF_INET, "0.0.0.0"


class HeldPort:
    """A port bound on the wildcard address so that nothing else can bind it, until closed."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.port = int(sock.getsockname()[1])

    def share(self) -> None:
        """Lets a server that sets ``SO_REUSEADDR`` (a framework's store) bind beside us.

        Call it right before that server binds: until then no socket can take the port.
        """
        if self._sock.fileno() >= 0:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def close(self) -> None:
        """Lets go of the port (idempotent); a server that bound it keeps it."""
        self._sock.close()

    @property
    def closed(self) -> bool:
        """True once `close` ran."""
        return self._sock.fileno() < 0

    def __enter__(self) -> HeldPort:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def hold_port(
    ports: range | None = None,
    host: str = "0.0.0.0",
    rng: random.Random | None = None,
    attempts: int = ATTEMPTS,
) -> HeldPort:
    """Holds a port free on every address of `host`'s family.

    `ports` None: the kernel picks one (a port no socket of any address holds); else random
    ports of `ports` are tried, each at most once.

    Raises:
        NoFreePort: every port tried is in use somewhere.
    """
    family, address = wildcard(host)
    if ports is None:
        candidates = [0]
    else:
        count = min(attempts, len(ports))
        candidates = (rng or random.Random()).sample(ports, count) if count else []
    last: OSError | None = None
    for port in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # both families
            sock.bind((address, port))
        except OSError as e:
            sock.close()
            if e.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise NoFreePort(e.errno, f"cannot bind {address} port {port}: {e}") from e
            last = e
            continue
        return HeldPort(sock)
    span = "the kernel's choice" if ports is None else f"{len(candidates)} of {_name(ports)}"
    raise NoFreePort(errno.EADDRINUSE, f"no free port on every address ({span})") from last


def free_static_port(
    band: Band, rng: random.Random | None = None, attempts: int = ATTEMPTS, host: str = "0.0.0.0"
) -> int:
    """A port of `band` that no socket of any address holds right now.

    Its server binds it next; the band is outside the ephemeral range, so no outgoing
    connection is given it meanwhile.
    """
    with hold_port(static_band(band), host, rng, attempts) as held:
        return held.port


def parse_port_range(text: str) -> range:
    """``LOW-HIGH`` (both included) or one port -> a range; ValueError naming what is wrong."""
    low, dash, high = text.strip().partition("-")
    try:
        first = int(low)
        last = int(high) if dash else first
    except ValueError:
        raise ValueError(f"{text!r}: expected LOW-HIGH (e.g. 24000-24999) or one port") from None
    if not 1 <= first <= last <= 65535:
        raise ValueError(f"{text!r}: expected 1 <= LOW <= HIGH <= 65535")
    return range(first, last + 1)


def _name(ports: range) -> str:
    return f"ports {ports.start}-{ports.stop - 1}" if ports else "no ports"
