"""Who may hold a connection: caps, room reserved for privileged peers, and whom to evict.

Why eviction instead of refusing at the cap: a cap that refuses the newcomer lets whoever
opened connections first keep them, so 1,000 idle sockets took a training pod's exporter off
Prometheus and 1,020 unauthenticated TLS clients took the metrics API off kube-apiserver. Here
a newcomer that finds the room full closes the connection that is worth least: one idle
between requests (longest idle first), then one still handshaking or reading a head (longest
first). A connection waiting for its turn at being answered
(:mod:`edl_common.http.fairness`) counts as idle; one whose request is being served is never
evicted, and unprivileged newcomers never evict privileged connections. Privileged (a client
certificate the TLS context verified: the aggregator's front proxy) is only known after the
handshake, so every connection starts unprivileged; unprivileged ones may hold
``max_connections - reserved`` at most, and at most ``max_per_peer`` from one address.

Memory is the third cap (:class:`~edl_common.http.memory.MemoryBudget`, when given): each
connection is charged an estimate of what it holds when it opens, and a request body its
size while it is read; a newcomer that does not fit closes a connection as above (or is
refused), and a body of an unprivileged connection that does not fit is refused.

The table is bookkeeping over a clock and a memory reading the caller passes: no sockets,
no tasks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from edl_common.http.memory import MemoryBudget


class Phase(enum.Enum):
    """Where a connection is in its life, as far as eviction cares."""

    HANDSHAKE = "handshake"
    """TLS handshake in progress."""
    WAITING = "waiting"
    """No byte of the next request yet (idle between requests, or a fresh connection)."""
    READING = "reading"
    """A request head or body partly received."""
    QUEUED = "queued"
    """A complete request waiting for its turn (pipelined): evicted like an idle one."""
    SERVING = "serving"
    """A complete request being answered: never evicted."""


@dataclass(frozen=True)
class AdmissionLimits:
    """How many connections, and how many of them unprivileged."""

    max_connections: int = 1024
    """Open connections at most (any phase, any privilege)."""
    reserved: int = 0
    """Of those, room only privileged connections may use."""
    max_per_peer: int | None = None
    """Unprivileged connections from one address at most (None: no per-peer cap)."""
    idle_grace: float = 1.0
    """Seconds a fresh or idle connection waits before it counts as idle for eviction
    (a scrape that just connected is not idle)."""


@dataclass(eq=False)
class Tracked:
    """One open connection as the admission table sees it."""

    peer: str
    phase: Phase
    since: float
    """When it entered its phase (the clock the table was given)."""
    close: Callable[[], None]
    """Closes the connection (eviction)."""
    privileged: bool | None = None
    """None until the handshake says (plain connections: False at once)."""
    cost: int = 0
    """Bytes charged to it (its estimate, and the body being read)."""
    evicted: bool = field(default=False)


class Admission:
    """The table of open connections and the admission rule over it."""

    def __init__(
        self,
        limits: AdmissionLimits,
        clock: Callable[[], float],
        memory: MemoryBudget | None = None,
    ) -> None:
        self.limits = limits
        self._clock = clock
        self.memory = memory
        self.charged = 0
        """Bytes charged to open connections."""
        self._open: set[Tracked] = set()
        self._candidates: dict[Phase, dict[Tracked, None]] = {
            Phase.WAITING: {},
            Phase.HANDSHAKE: {},
            Phase.READING: {},
        }
        """Connections that may be closed for a newcomer, by phase (QUEUED with WAITING),
        each in the order it entered its phase: the first is the one there longest."""
        self._unprivileged: dict[str, int] = {}
        """Open connections known to be unprivileged, by peer (kept, not counted per call)."""
        self._unprivileged_total = 0
        self.refused = 0
        """Connections closed because no room could be made."""
        self.evicted = 0
        """Connections closed to make room for a newer one."""
        self.short_of_memory = 0
        """Connections and bodies refused, or connections closed, for want of memory."""

    @property
    def open(self) -> int:
        """Connections open now."""
        return len(self._open)

    def unprivileged(self, peer: str | None = None) -> int:
        """Open connections known to be unprivileged (from ``peer`` only, when given)."""
        if peer is None:
            return self._unprivileged_total
        return self._unprivileged.get(peer, 0)

    def accept(
        self, peer: str, phase: Phase, close: Callable[[], None], cost: int = 0
    ) -> Tracked | None:
        """Register a new connection costing about ``cost`` bytes.

        None (and nothing registered): no room was made.
        """
        conn = Tracked(peer, phase, self._clock(), close)
        self._open.add(conn)
        self._place(conn)
        if len(self._open) > self.limits.max_connections and not self._evict(conn, None, False):
            self._refuse(conn)
            return None
        if not self._fits_memory(conn, cost):
            self._refuse(conn)
            return None
        conn.cost = cost
        self.charged += cost
        if phase is not Phase.HANDSHAKE:
            self._mark_unprivileged(conn)
            if not self._fits_unprivileged(conn):
                self._refuse(conn)
                return None
        return conn

    def classify(self, conn: Tracked, privileged: bool) -> bool:
        """Record what the handshake said; False: no room for it (the caller closes it)."""
        if privileged:
            conn.privileged = True
            self._unplace(conn)  # never closed for a newcomer
            return True
        self._mark_unprivileged(conn)
        if not self._fits_unprivileged(conn):
            self._refuse(conn)
            return False
        return True

    def enter(self, conn: Tracked, phase: Phase) -> None:
        """The connection moved on to ``phase``."""
        self._unplace(conn)
        conn.phase = phase
        conn.since = self._clock()
        if conn in self._open:
            self._place(conn)

    def leave(self, conn: Tracked) -> None:
        """The connection closed (idempotent)."""
        if conn in self._open:
            self._drop(conn)

    def charge_body(self, conn: Tracked, size: int) -> bool:
        """Charge a request body of ``size`` bytes to be read.

        False: an unprivileged connection's body does not fit (nothing charged; the caller
        refuses it).
        """
        if not conn.privileged and self.memory is not None:
            if not self.memory.fits(self.charged, size):
                self.short_of_memory += 1
                return False
        conn.cost += size
        self.charged += size
        return True

    def discharge(self, conn: Tracked, size: int) -> None:
        """A body charged with :meth:`charge_body` is no longer held."""
        size = min(size, conn.cost)
        conn.cost -= size
        if conn in self._open:
            self.charged -= size

    def _fits_memory(self, conn: Tracked, cost: int) -> bool:
        """Whether ``cost`` more bytes fit, making room by one connection at most.

        Past the high water (up to the swap line) the newcomer takes the place of the
        connection worth least (a swap: memory stays level), else there is no room. One,
        not as many as the reading asks for: resident memory does not fall when a connection
        closes (the heap keeps it for the next), so closing more would empty the room for
        nothing; and every newcomer, the front proxy's among them (its privilege is not
        known before its handshake), still gets in while there is a stranger to close.
        """
        if self.memory is None or self.memory.fits(self.charged, cost):
            return True
        if self.memory.swappable(self.charged) and self._evict(conn, None, False):
            return True
        self.short_of_memory += 1
        return False

    def _place(self, conn: Tracked) -> None:
        """Put ``conn`` last among the candidates of its phase (unless it cannot be one)."""
        if conn.privileged is True or conn.phase is Phase.SERVING:
            return
        group = Phase.WAITING if conn.phase is Phase.QUEUED else conn.phase
        self._candidates[group][conn] = None

    def _unplace(self, conn: Tracked) -> None:
        group = Phase.WAITING if conn.phase is Phase.QUEUED else conn.phase
        if group in self._candidates:
            self._candidates[group].pop(conn, None)

    def _mark_unprivileged(self, conn: Tracked) -> None:
        conn.privileged = False
        self._unprivileged[conn.peer] = self._unprivileged.get(conn.peer, 0) + 1
        self._unprivileged_total += 1

    def _drop(self, conn: Tracked) -> None:
        self._open.discard(conn)
        self._unplace(conn)
        self.charged -= conn.cost
        if conn.privileged is False:
            self._unprivileged_total -= 1
            left = self._unprivileged[conn.peer] - 1
            if left:
                self._unprivileged[conn.peer] = left
            else:
                del self._unprivileged[conn.peer]

    def serving(self) -> int:
        """Connections whose request is being answered."""
        return sum(1 for c in self._open if c.phase is Phase.SERVING)

    def _fits_unprivileged(self, conn: Tracked) -> bool:
        cap = self.limits.max_per_peer
        if cap is not None and self.unprivileged(conn.peer) > cap:
            if not self._evict(conn, conn.peer, True):
                return False
        room = self.limits.max_connections - self.limits.reserved
        return self.unprivileged() <= room or self._evict(conn, None, True)

    def _evict(self, newcomer: Tracked, peer: str | None, known: bool) -> bool:
        victim = self._victim(newcomer, peer, known, self._clock() - self.limits.idle_grace)
        if victim is None:
            return False
        victim.evicted = True
        self._drop(victim)
        self.evicted += 1
        victim.close()
        return True

    def _refuse(self, conn: Tracked) -> None:
        self._drop(conn)
        self.refused += 1

    def _victim(
        self, newcomer: Tracked, peer: str | None, known: bool, idle_before: float
    ) -> Tracked | None:
        """The connection to close for ``newcomer``, or None.

        Candidates: not privileged (``known``: known to be unprivileged, not still
        handshaking), not being served, not the newcomer, from ``peer`` when given. First
        those idle (or queued for a turn) since before ``idle_before`` (longest first), then
        those handshaking or reading since before it (slow: longest first); only then the
        young ones, waiting before reading, oldest first (a scrape that just connected and
        sent its head goes last).

        Each phase's candidates are kept in the order they entered it, so its first match is
        its best: a victim costs a few steps, not a pass over every connection (a flood of
        1,024 half-open handshakes, each newcomer closing one, held the loop for seconds).
        """
        best: Tracked | None = None
        best_worth = (4, 0.0)
        for phase, group in self._candidates.items():
            if known and phase is Phase.HANDSHAKE:
                continue  # their privilege is not known yet
            for c in group:  # bounded by the group; the first match is the group's best
                if c is newcomer or (peer is not None and c.peer != peer):
                    continue
                waiting = phase is Phase.WAITING
                young = c.since > idle_before
                worth = ((2 if young else 0) + (0 if waiting else 1), c.since)
                if worth < best_worth:
                    best, best_worth = c, worth
                break
        return best
