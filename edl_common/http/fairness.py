"""Turns at being answered: no connection holds the event loop, strangers share a bounded slice.

Why: one TLS connection that pipelined ``GET /healthz`` requests took the metrics API off
kube-apiserver (issue 37). While a connection's buffer held requests its task read, answered
and wrote without ever suspending, so one read of 32-256 KiB of requests (about 1,600 of them)
ran before any other connection, handshake or front-proxy request got a turn.

The model is kube-apiserver's API Priority and Fairness (APF), cut down to one event loop:

* **Priority levels with their own share.** APF classifies each request (FlowSchemas) into a
  priority level whose concurrency shares (seats, a share of the server's capacity) no other
  level's load can take. Here the level is the connection's: the front proxy's (a client
  certificate the TLS context verified) and everyone else's. One round (one pass of the
  event loop) answers at most :attr:`FairnessLimits.unprivileged_seats` requests of the
  second level, however many connections it has, and that level's requests take at most
  :attr:`FairnessLimits.unprivileged_share` of the loop's time (a token bucket of seconds:
  past it the next round waits); the front proxy's level is never held back by it (like
  APF's exempt level), so its share holds under any unauthenticated load, and a flood leaves
  the CPU to the rest of the node (kube-apiserver on a shared machine).
* **Fair queuing across flows.** Within a level APF queues requests by flow (a user, a
  namespace), hashed into queues served round robin. Here a flow is a peer address: the
  waiting connections of one address form one queue, and the queues are served round robin,
  so an address with four connections gets one address's share, not four.
* **A bounded burst per connection.** No connection answers more than one request per round
  when unprivileged, or more than :attr:`FairnessLimits.privileged_burst` in a row without
  yielding to the loop when privileged.

What APF does and this does not: no request is refused for waiting (APF answers 429 when a
queue is full). A connection waiting its turn reads nothing more, so TCP's flow control stops
its client; and the admission table may close it for a newcomer
(:attr:`~edl_common.http.admission.Phase.QUEUED`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

_LONGEST_CHARGE_S = 0.02
"""The most one request is charged: the loop thread's CPU time while it was answered also
counts what other connections did while it waited (on a thread, on a slow reader)."""


@dataclass(frozen=True)
class FairnessLimits:
    """How much of the event loop each kind of connection gets."""

    unprivileged_seats: int = 1
    """Requests of connections without a verified client certificate answered per round,
    all of them together. A round starts in one pass of the event loop and the connections
    it lets go run in the next, beside the next round's first: so at most twice this many
    in one pass."""
    unprivileged_share: float = 0.1
    """Of the event loop's time, what those requests may take, all of them together. A
    process that spends little CPU on strangers stays quick to wake for the front proxy on a
    busy node: through kube-apiserver on a loaded 2-CPU machine, the front proxy's p50 under
    four pipelining strangers was 21 ms with half (idle: 6 ms), 7 ms with a tenth."""
    unprivileged_burst_s: float = 0.02
    """Seconds of their time that may be spent at once after a quiet spell."""
    privileged_burst: int = 8
    """Pipelined requests a front-proxy connection answers in a row before it yields."""


@dataclass(eq=False)
class Turn:
    """One connection's place in the turn-taking."""

    flow: str
    """Whose share it uses (the peer's address)."""
    privileged: bool
    round: int = -1
    """The round of its last request (unprivileged)."""
    streak: int = 0
    """Requests answered since it last yielded (privileged)."""


@dataclass
class _Waiting:
    turn: Turn
    granted: asyncio.Future[None]


class TurnTaking:
    """Grants turns at being answered, round by round, fairly across flows.

    A round ends when the event loop has run every callback that was ready; the next starts
    with :attr:`FairnessLimits.unprivileged_seats` seats, given to waiting connections one
    flow at a time.
    """

    def __init__(self, limits: FairnessLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._round = 0
        self._seats = limits.unprivileged_seats
        self._credit = limits.unprivileged_burst_s
        """Seconds unprivileged requests may still take (below zero: in debt)."""
        self._refilled_at = clock()
        self._queues: dict[str, deque[_Waiting]] = {}
        """Waiting connections by flow; the dict's order is the round robin's."""
        self._next_round: asyncio.Handle | None = None
        self.waits = 0
        """Requests that waited for a turn (for tests and benchmarks)."""

    @property
    def waiting(self) -> int:
        """Connections waiting for a turn now."""
        return sum(len(q) for q in self._queues.values())

    async def take(self, turn: Turn, waiting: Callable[[], None]) -> None:
        """Wait (if need be) for ``turn``'s connection to answer its next request.

        ``waiting`` is called before the connection waits (it becomes evictable).
        """
        if turn.privileged:
            turn.streak += 1
            if turn.streak > self.limits.privileged_burst:
                turn.streak = 1
                await asyncio.sleep(0)  # one pass of the loop for everyone else
            return
        if turn.round != self._round and self._seats > 0 and not self._queues and self._funded():
            self._seats -= 1
            turn.round = self._round
            self._schedule_round()
            return
        entry = _Waiting(turn, asyncio.get_running_loop().create_future())
        self._queues.setdefault(turn.flow, deque()).append(entry)
        self.waits += 1
        waiting()
        self._schedule_round()
        try:
            await entry.granted
        finally:
            self._forget(entry)
        turn.round = self._round

    def spent(self, turn: Turn, seconds: float) -> None:
        """``turn``'s request took ``seconds`` of the loop thread's CPU.

        Counted for unprivileged ones, at most :data:`_LONGEST_CHARGE_S` each.
        """
        if not turn.privileged:
            self._funded()
            self._credit -= min(max(seconds, 0.0), _LONGEST_CHARGE_S)

    def _funded(self) -> bool:
        """Refill the unprivileged level's time; whether it has some left."""
        now = self._clock()
        limits = self.limits
        earned = (now - self._refilled_at) * limits.unprivileged_share
        self._credit = min(limits.unprivileged_burst_s, self._credit + earned)
        self._refilled_at = now
        return self._credit > 0

    def _schedule_round(self) -> None:
        if self._next_round is not None:
            return
        loop = asyncio.get_running_loop()
        if self._funded():
            self._next_round = loop.call_soon(self._new_round)
        else:  # in debt: the next round when the level has earned its time back
            wait = -self._credit / self.limits.unprivileged_share
            self._next_round = loop.call_later(wait, self._new_round)

    def _new_round(self) -> None:
        """Start a round: fresh seats, given to the waiting flows in turn."""
        self._next_round = None
        if not self._funded():
            self._schedule_round()
            return
        self._round += 1
        self._seats = self.limits.unprivileged_seats
        for _ in range(self.waiting):  # bounded: each pass takes one entry or stops
            if self._seats <= 0 or not self._queues:
                break
            flow = next(iter(self._queues))
            queue = self._queues.pop(flow)
            entry = queue.popleft()
            if queue:
                self._queues[flow] = queue  # to the back of the round robin
            if not entry.granted.done():  # not cancelled (evicted) while it waited
                entry.granted.set_result(None)
                self._seats -= 1
        if self._queues:
            self._schedule_round()

    def _forget(self, entry: _Waiting) -> None:
        """Take ``entry`` out of its queue (it was cancelled: evicted, or the server stops)."""
        queue = self._queues.get(entry.turn.flow)
        if queue is None:
            return
        try:
            queue.remove(entry)
        except ValueError:
            return
        if not queue:
            del self._queues[entry.turn.flow]
