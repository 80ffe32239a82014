"""Where the ranks of one generation meet before their framework forms its group.

Why: a framework's group formation blocks in C++ until every rank is there, and a store that
served an earlier group must not serve the next one (Paddle 3.3.1: a TCPStore server reused
by a later gloo group hands out addresses of the earlier one, ``address.cc:30 sizeof(impl_)
== bytes.size()``, or hangs until the store timeout). So rank 0's trainer serves this small
line protocol on the generation's master endpoint (its member's advertised port) and:

- every rank checks in with its generation and rank, polling every `POLL_SECONDS`, until all
  ranks of the generation checked in within `FRESH_SECONDS` (a rank that gave up drops out);
- then each is told a *fresh* store endpoint (a port of rank 0's host, a new store for every
  group), where the framework forms the group at once, with everyone known present (the others
  dial only once rank 0's store listens: Paddle's client retries every 3 s). The host *holds*
  that port on every address from the moment it opens the meeting (`edl_common.ports`): the
  store binds ``0.0.0.0``, and Paddle's aborts the process when that bind fails, so no other
  socket may take the port before it does;
- while waiting, each rank asks its `abandon` callback (a newer world handed over, a stop, the
  agent gone) and leaves with `Superseded`: the wait is in Python, never stuck in C++.

A check-in for another generation than the host's is answered ``wait`` (the host has not
opened it yet) or ``gone`` (it moved past it): two generations never meet.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.protocol.errors import ElasticError, RendezvousTimeout
from edl_common.ports import HeldPort, NoFreePort, hold_port

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
"""How often a waiting rank checks in again."""
FRESH_SECONDS = 1.0
"""A check-in older than this does not count (the rank may have given up)."""
MAGIC = "edl-rendezvous"


class Superseded(ElasticError):
    """The wait was abandoned: a newer world, a stop request, or the agent is gone."""


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


@dataclass
class _Meeting:
    world_size: int
    store: str
    port: HeldPort
    """The store's port, held on every address until the store has bound it."""
    seen: dict[int, float] = field(default_factory=dict)
    complete: bool = False
    told: set[int] = field(default_factory=set)
    """Ranks that received the store endpoint (rank 0 forms the group only once all did)."""


class RendezvousHost:
    """Rank 0's side: one listening socket, answering for every generation it opens."""

    def __init__(
        self,
        endpoint: str,
        clock: Callable[[], float] = time.monotonic,
        store_ports: range | None = None,
    ) -> None:
        """Listens on `endpoint`.

        `store_ports`: where the stores' ports come from (``EDL_STORE_PORTS``); None: any
        port the kernel finds free on every address.
        """
        host, port = _split(endpoint)
        self.endpoint = endpoint
        self._clock = clock
        self._store_ports = store_ports
        self._lock = threading.Lock()
        self._meetings: dict[int, _Meeting] = {}
        self._newest = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="edl-rendezvous", daemon=True)
        self._thread.start()

    def open(self, generation: int, world_size: int) -> str:
        """Starts the meeting of `generation` and returns its store endpoint.

        Rank 0 (the host's own) is present. The store's port is held on every address of this
        host until `lend`.

        Raises:
            NoFreePort: no port could be held (`EDL_STORE_PORTS` all in use).
        """
        held = hold_port(self._store_ports, _split(self.endpoint)[0])
        store = f"{_split(self.endpoint)[0]}:{held.port}"
        with self._lock:
            for g in [g for g in self._meetings if g <= generation]:
                self._meetings.pop(g).port.close()  # its store, if any, keeps the port
            self._meetings[generation] = _Meeting(world_size, store, held, {0: float("inf")})
            self._newest = max(self._newest, generation)
        return store

    def lend(self, generation: int) -> None:
        """Lets rank 0's store bind the port of `generation` (`HeldPort.share`).

        The host lets go of the port when the next meeting opens or the host closes.
        """
        with self._lock:
            meeting = self._meetings.get(generation)
            if meeting is not None:
                meeting.port.share()

    def complete(self, generation: int) -> bool:
        """True once every rank of `generation` checked in (latched: stays true)."""
        with self._lock:
            return self._check(generation)

    def everyone_told(self, generation: int) -> bool:
        """True once every other rank of `generation` received the store endpoint.

        Rank 0 waits for this before forming the group: a framework may hold the interpreter
        lock while its store waits for clients, and then this host could answer nobody.
        """
        with self._lock:
            meeting = self._meetings.get(generation)
            return meeting is not None and meeting.told >= set(range(1, meeting.world_size))

    def _told(self, generation: int, rank: int) -> None:
        with self._lock:
            meeting = self._meetings.get(generation)
            if meeting is not None:
                meeting.told.add(rank)

    def _check(self, generation: int) -> bool:
        meeting = self._meetings.get(generation)
        if meeting is None:
            return False
        if not meeting.complete:
            now = self._clock()
            fresh = {r for r, t in meeting.seen.items() if now - t <= FRESH_SECONDS}
            meeting.complete = fresh >= set(range(meeting.world_size))
        return meeting.complete

    def answer(self, line: str) -> str:
        """One request -> one reply (the protocol, without the socket)."""
        parts = line.split()
        if len(parts) != 3 or parts[0] != MAGIC:
            return "error"
        try:
            generation, rank = int(parts[1]), int(parts[2])
        except ValueError:
            return "error"
        with self._lock:
            meeting = self._meetings.get(generation)
            if meeting is None:
                return "gone" if generation < self._newest else "wait"
            if not 0 <= rank < meeting.world_size:
                return "error"
            meeting.seen[rank] = max(meeting.seen.get(rank, 0.0), self._clock())
            return f"ok {meeting.store}" if self._check(generation) else "wait"

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(2.0)
                    line = conn.makefile("r", encoding="utf-8").readline(256)
                    reply = self.answer(line)
                    conn.sendall((reply + "\n").encode())
                except OSError:
                    continue
                if reply.startswith("ok "):
                    _, generation, rank = line.split()
                    self._told(int(generation), int(rank))

    def close(self) -> None:
        """Stops serving and lets go of every held store port (idempotent)."""
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass
        with self._lock:
            for meeting in self._meetings.values():
                meeting.port.close()


def ask(endpoint: str, generation: int, rank: int, timeout: float = 1.0) -> str:
    """One check-in; returns the host's reply line (raises OSError when nobody listens)."""
    host, port = _split(endpoint)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(f"{MAGIC} {generation} {rank}\n".encode())
        return s.makefile("r", encoding="utf-8").readline(256).strip()


def _listening(endpoint: str) -> bool:
    """True when `endpoint` accepts a connection (Paddle's client retries only every 3 s)."""
    try:
        with socket.create_connection(_split(endpoint), timeout=1.0):
            return True
    except OSError:
        return False


def meet(
    master: str,
    generation: int,
    rank: int,
    world_size: int,
    timeout: float,
    abandon: Callable[[], bool],
    host: RendezvousHost | None = None,
) -> str:
    """Waits until every rank of `generation` is present; returns the group's store endpoint.

    Rank 0 passes its `host` (listening on `master`), which opens the meeting with a fresh
    store port of its own host, held until rank 0's store binds it: rank 0 must create its
    store right after this returns (the port is lent to it then). The others check in on
    `master`.

    Raises:
        Superseded: `abandon()` said so while waiting, or the host moved past `generation`.
        RendezvousTimeout: not everyone came within `timeout` s (or rank 0 found no port
            for the store).
    """
    deadline = time.monotonic() + timeout
    store = ""
    if host is not None:
        try:
            store = host.open(generation, world_size)
        except NoFreePort as e:
            raise RendezvousTimeout(f"generation {generation}: no port for its store: {e}") from e
    while True:
        if abandon():
            raise Superseded(f"generation {generation}: a newer world or a stop came first")
        if host is not None:
            if host.complete(generation) and host.everyone_told(generation):
                host.lend(generation)
                return store
        elif store:
            if _listening(store):  # rank 0 creates it once every rank has been told
                return store
        else:
            try:
                reply = ask(master, generation, rank)
            except OSError:
                reply = "wait"  # rank 0 not listening yet (still starting): poll again
            if reply.startswith("ok "):
                # From now on only the store is polled: rank 0's framework may hold the
                # interpreter lock while its store waits for us, so the host cannot answer.
                store = reply[3:]
                continue
            if reply == "gone":
                raise Superseded(f"rank 0 at {master} moved past generation {generation}")
        if time.monotonic() >= deadline:
            raise RendezvousTimeout(
                f"generation {generation}: not every rank reached {master} within {timeout:.0f} s"
            )
        time.sleep(POLL_SECONDS)
