"""The dry run's state: free room per node and where each job's workers are, mutable.

Nodes are tried in name order (first fit), so the same inputs always give the same plan.
Lookups stay cheap on large clusters: the nodes a pod may use are computed once per
(tolerations, node selector), and a first-fit search resumes where the last one for the
same request stopped (room only shrinks until something is released). A search for room
to make (`reclaimable`) skips the nodes where even every job worker's room would not be
enough: that bound (free room plus the workers' room) only shrinks during a round, and only
where a pod that is no job's worker is placed (a worker placed or released moves room between
the two), so the nodes left for one request are kept and only those nodes are checked again,
not all of them. The node with
room for the most pods of a size (`roomiest`) is looked up in an index of the nodes by how
many fit, kept up to date with the nodes whose room changed since the last look-up, not
found by scanning every node.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from edl_sizing.cluster import Node, Toleration
from edl_sizing.resources import Resources

_Shape = tuple[tuple[Toleration, ...], tuple[tuple[str, str], ...]]


class Packing:
    """Free room of the nodes new pods may use, and job workers per node."""

    def __init__(self, nodes: Sequence[Node], free: Mapping[str, Resources]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.free = dict(free)
        self.version = 0
        """Counts the changes of room and workers (what was computed at one is still true)."""
        self.workers: dict[str, dict[str, int]] = {}
        """job key -> node name -> workers of the job on that node."""
        self.by_node: dict[str, dict[str, int]] = {}
        """node name -> job key -> workers of the job on that node."""
        self._candidates: dict[_Shape, tuple[list[Node], frozenset[str]]] = {}
        self._hints: dict[tuple[Resources, _Shape], int] = {}
        """`first_fit` by request: no node before this index of its candidates has room."""
        self._positions: dict[_Shape, dict[str, int]] = {}
        """Each node's index among the candidates of a shape (where a release moves a hint)."""
        self.worker_room: dict[str, Resources] = {}
        """node name -> the room of the job workers placed there (with `free`: the most that
        removing workers could free, which only pods placed without a job lower)."""
        self._reclaimable: dict[tuple[Resources, _Shape], tuple[list[Node], int]] = {}
        """`reclaimable` by request: the nodes, and how much of `_lowered` they were checked
        against."""
        self._lowered: list[str] = []
        """Nodes where a pod of no job was placed (their bound fell) since the first
        `reclaimable`, in order."""
        self._rooms: dict[tuple[Resources, _Shape], _RoomIndex] = {}
        self._journal: list[tuple[str, Resources, str | None, Resources | None, int]] = []
        """(node, its free room, job, its workers' room, the job's workers there) before each
        change since the oldest open `savepoint`."""
        self._open = 0
        """Transactions open (`savepoint` without its `commit` or `rollback`)."""

    def savepoint(self) -> int:
        """Start a transaction: `rollback` undoes every change made after it, `commit` keeps them.

        Each change is journalled with the values it replaced, so a transaction costs what it
        changes, not a copy of every node's room and workers (a round at 1,000 nodes took 141
        of those copies, a tenth of its time).
        """
        self._open += 1
        return len(self._journal)

    def commit(self, savepoint: int) -> None:
        """End the transaction started at ``savepoint``, keeping its changes."""
        self._close()

    def rollback(self, savepoint: int) -> None:
        """Undo every change since ``savepoint`` and end its transaction."""
        journal = self._journal
        for node, free, job, room, count in reversed(journal[savepoint:]):
            self.free[node] = free
            if job is None:
                continue
            if room is None:
                self.worker_room.pop(node, None)
            else:
                self.worker_room[node] = room
            _set_count(self.workers.setdefault(job, {}), node, count)
            _set_count(self.by_node.setdefault(node, {}), job, count)
        del journal[savepoint:]
        self.version += 1
        self._hints = {}
        self._reclaimable = {}
        self._lowered = []
        self._rooms = {}
        self._close()

    def _close(self) -> None:
        self._open -= 1
        if not self._open:
            self._journal.clear()

    def _record(self, node: str, job: str | None) -> None:
        """Journal what a change of ``node`` (for ``job``'s workers) is about to replace."""
        if job is None:
            self._journal.append((node, self.free[node], None, None, 0))
        else:
            count = self.by_node.get(node, {}).get(job, 0)
            self._journal.append((node, self.free[node], job, self.worker_room.get(node), count))

    def candidates(
        self, tolerations: tuple[Toleration, ...], node_selector: Mapping[str, str]
    ) -> list[Node]:
        """Nodes a pod with these tolerations and selector may go to, in name order."""
        return self._accepting(tolerations, node_selector)[0]

    def _allowed_names(
        self, tolerations: tuple[Toleration, ...], node_selector: Mapping[str, str]
    ) -> frozenset[str]:
        """The names of `candidates`, as a set (a lookup, not a scan, per worker)."""
        return self._accepting(tolerations, node_selector)[1]

    def _accepting(
        self, tolerations: tuple[Toleration, ...], node_selector: Mapping[str, str]
    ) -> tuple[list[Node], frozenset[str]]:
        """`candidates` and their names, found once per (tolerations, node selector)."""
        shape = (tolerations, tuple(sorted(node_selector.items())))
        found = self._candidates.get(shape)
        if found is None:
            nodes = [n for n in self.nodes if n.accepts(tolerations, node_selector)]
            found = (nodes, frozenset(n.name for n in nodes))
            self._candidates[shape] = found
        return found

    def reclaimable(
        self,
        requests: Resources,
        tolerations: tuple[Toleration, ...],
        node_selector: Mapping[str, str],
    ) -> list[Node]:
        """`candidates` where ``requests`` could fit once every job worker there is removed.

        A node left out cannot give room by removing workers, whichever are removable. The
        bound is checked with a margin far above rounding (a node in doubt stays in).
        """
        key = (requests, (tolerations, tuple(sorted(node_selector.items()))))
        cached = self._reclaimable.get(key)
        if cached is None:
            nodes = self.candidates(tolerations, node_selector)
            found = [n for n in nodes if _could_fit(requests, self._reclaim(n.name))]
        else:
            found, checked = cached
            if checked < len(self._lowered):
                lowered = set(self._lowered[checked:])
                found = [
                    n
                    for n in found
                    if n.name not in lowered or _could_fit(requests, self._reclaim(n.name))
                ]
        self._reclaimable[key] = (found, len(self._lowered))
        return found

    def _reclaim(self, node: str) -> Resources:
        room = self.worker_room.get(node)
        return self.free[node] if room is None else self.free[node] + room

    def first_fit(
        self,
        requests: Resources,
        tolerations: tuple[Toleration, ...] = (),
        node_selector: Mapping[str, str] | None = None,
    ) -> str | None:
        """The first node (by name) with room for ``requests``, or None."""
        selector = node_selector or {}
        nodes = self.candidates(tolerations, selector)
        shape = (tolerations, tuple(sorted(selector.items())))
        hint_key = (requests, shape)
        start = self._hints.get(hint_key, 0)
        for i in range(start, len(nodes)):
            if requests.fits_in(self.free[nodes[i].name]):
                self._hints[hint_key] = i
                return nodes[i].name
        self._hints[hint_key] = len(nodes)
        return None

    def _position(self, shape: _Shape, node: str) -> int | None:
        """``node``'s index among the candidates of ``shape`` (None: not one of them)."""
        positions = self._positions.get(shape)
        if positions is None:
            nodes = self._accepting(shape[0], dict(shape[1]))[0]
            positions = self._positions[shape] = {n.name: i for i, n in enumerate(nodes)}
        return positions.get(node)

    def local_fit(
        self,
        job: str,
        requests: Resources,
        tolerations: tuple[Toleration, ...] = (),
        node_selector: Mapping[str, str] | None = None,
    ) -> str | None:
        """A node for one more worker of ``job``: where most of its workers are, else first fit.

        Growth stays node-local first (fewer nodes spanned: a job's speed depends on it). A
        job whose nodes are full spills over onto the node with the most room for its
        workers (its next ones follow it there, as kube-scheduler's LeastAllocated score and
        the trainer's pod affinity place them), not onto the first node with room for one.
        """
        selector = node_selector or {}
        mine = self.workers.get(job, {})
        if mine:
            allowed = self._allowed_names(tolerations, selector)
            for node in sorted(mine, key=lambda n: (-mine[n], n)):
                if node in allowed and requests.fits_in(self.free[node]):
                    return node
            return self.roomiest(requests, tolerations, selector)
        return self.first_fit(requests, tolerations, selector)

    def roomiest(
        self,
        requests: Resources,
        tolerations: tuple[Toleration, ...] = (),
        node_selector: Mapping[str, str] | None = None,
    ) -> str | None:
        """The node with room for the most pods of ``requests`` (first by name on a tie).

        As scanning the nodes in name order and keeping the first whose count beats the best
        so far by more than 1e-9 (:class:`_RoomIndex`).
        """
        selector = node_selector or {}
        key = (requests, (tolerations, tuple(sorted(selector.items()))))
        index = self._rooms.get(key)
        if index is None:
            nodes = self.candidates(tolerations, selector)
            index = self._rooms[key] = _RoomIndex(requests, nodes, self.free)
        elif index.dirty:
            index.update(self.free)
        return index.best()

    def place(self, node: str, requests: Resources, job: str | None = None) -> None:
        """Take room on ``node`` (for a worker of ``job`` when given)."""
        if self._open:
            self._record(node, job)
        self.free[node] = self.free[node] - requests
        self.version += 1
        for index in self._rooms.values():
            index.dirty.add(node)
        if job is None:
            if self._reclaimable:
                self._lowered.append(node)
        else:
            room = self.worker_room.get(node)
            self.worker_room[node] = requests if room is None else room + requests
            per_node = self.workers.setdefault(job, {})
            per_node[node] = per_node.get(node, 0) + 1
            per_job = self.by_node.setdefault(node, {})
            per_job[job] = per_job.get(job, 0) + 1

    def place_all(self, pods: Sequence[tuple[str, Resources, str | None]]) -> None:
        """`place` for each (node, requests, job), in order, as one batch (a round's bound pods).

        The same sums in the same order as one `place` after another, kept as numbers until
        the end (a room made per node, not per pod).
        """
        if self._open:
            for node, requests, job in pods:
                self.place(node, requests, job)
            return
        free: dict[str, list[float]] = {}
        room: dict[str, list[float]] = {}
        lowered = self._lowered if self._reclaimable else None
        for node, requests, job in pods:
            f = free.get(node)
            if f is None:
                have = self.free[node]
                f = free[node] = [have.cpu, have.memory, have.gpu]
            f[0] -= requests.cpu
            f[1] -= requests.memory
            f[2] -= requests.gpu
            if job is None:
                if lowered is not None:
                    lowered.append(node)
                continue
            w = room.get(node)
            if w is None:
                held = self.worker_room.get(node)
                if held is None:
                    w = room[node] = [requests.cpu, requests.memory, requests.gpu]
                else:
                    w = room[node] = [held.cpu, held.memory, held.gpu]
                    w[0] += requests.cpu
                    w[1] += requests.memory
                    w[2] += requests.gpu
            else:
                w[0] += requests.cpu
                w[1] += requests.memory
                w[2] += requests.gpu
            per_node = self.workers.setdefault(job, {})
            per_node[node] = per_node.get(node, 0) + 1
            per_job = self.by_node.setdefault(node, {})
            per_job[job] = per_job.get(job, 0) + 1
        for node, f in free.items():
            self.free[node] = Resources(f[0], f[1], f[2])
        for node, w in room.items():
            self.worker_room[node] = Resources(w[0], w[1], w[2])
        self.version += len(pods)
        for index in self._rooms.values():
            index.dirty.update(free)

    def release(self, node: str, requests: Resources, job: str) -> None:
        """Give back the room of one worker of ``job`` on ``node``."""
        if self._open:
            self._record(node, job)
        self.free[node] = self.free[node] + requests
        self.version += 1
        for index in self._rooms.values():
            index.dirty.add(node)
        self.worker_room[node] = self.worker_room[node] - requests
        for key, start in self._hints.items():  # only ``node`` gained room: a hint past it
            at = self._position(key[1], node)  # goes back to it
            if at is not None and at < start:
                self._hints[key] = at
        _decrement(self.workers[job], node)
        _decrement(self.by_node[node], job)

    def workers_on(self, job: str, node: str) -> int:
        """Workers of ``job`` placed on ``node``."""
        return self.by_node.get(node, {}).get(job, 0)


class _RoomIndex:
    """The nodes with room for a pod of one size, grouped by how many such pods fit.

    ``best`` answers what scanning the nodes in name order answers, keeping the first node
    whose count beats the best so far by more than 1e-9: of nodes with equal counts only
    the first by name can be kept; a count that beats every lower one by more than 1e-9
    is kept whatever came before, and no lower count can replace it. So only the highest
    counts are scanned, down to the first one the next lower count does not come within
    1e-9 of (most often only the highest), and of each only its first node.
    """

    __slots__ = ("allowed", "count", "dirty", "groups", "levels", "requests")

    def __init__(self, requests: Resources, nodes: Sequence[Node], free: Mapping[str, Resources]):
        self.requests = requests
        self.allowed = frozenset(n.name for n in nodes)
        self.count: dict[str, float] = {}
        """node -> pods that fit (nodes where none fits are left out)."""
        self.groups: dict[float, set[str]] = {}
        """count -> the nodes with that count."""
        self.levels: list[float] = []
        """The counts in ``groups``, ascending."""
        self.dirty: set[str] = set()
        """Nodes whose room changed since the counts were taken."""
        for node in nodes:
            count = _room_count(requests, free[node.name])
            if count is not None:
                self._add(node.name, count)

    def _add(self, node: str, count: float) -> None:
        self.count[node] = count
        group = self.groups.get(count)
        if group is None:
            self.groups[count] = {node}
            bisect.insort(self.levels, count)
        else:
            group.add(node)

    def _remove(self, node: str) -> None:
        count = self.count.pop(node)
        group = self.groups[count]
        group.discard(node)
        if not group:
            del self.groups[count]
            del self.levels[bisect.bisect_left(self.levels, count)]

    def update(self, free: Mapping[str, Resources]) -> None:
        """Takes the counts of the nodes whose room changed."""
        for node in self.dirty:
            if node not in self.allowed:
                continue
            count = _room_count(self.requests, free[node])
            if node in self.count:
                if self.count[node] == count:
                    continue
                self._remove(node)
            if count is not None:
                self._add(node, count)
        self.dirty.clear()

    def best(self) -> str | None:
        """The node the name-order scan keeps (None: no node has room)."""
        levels = self.levels
        if not levels:
            return None
        low = len(levels) - 1
        while low > 0 and not levels[low] > levels[low - 1] + 1e-9:
            low -= 1
        if low == len(levels) - 1:
            return min(self.groups[levels[low]])
        best: tuple[float, str] | None = None
        for node, count in sorted((min(self.groups[c]), c) for c in levels[low:]):
            if best is None or count > best[0] + 1e-9:
                best = (count, node)
        return best[1] if best is not None else None


def _room_count(requests: Resources, free: Resources) -> float | None:
    """How many pods of ``requests`` fit ``free`` (as `Packing.roomiest` counts; None: none)."""
    if not requests.fits_in(free):
        return None
    pairs = ((requests.cpu, free.cpu), (requests.memory, free.memory), (requests.gpu, free.gpu))
    return min((have / need for need, have in pairs if need > 0), default=0.0)


def _could_fit(requests: Resources, bound: Resources) -> bool:
    """``requests`` fits ``bound``, or misses it by no more than rounding could explain."""
    return all(
        need <= have + 1e-6 * max(1.0, abs(have))
        for need, have in (
            (requests.cpu, bound.cpu),
            (requests.memory, bound.memory),
            (requests.gpu, bound.gpu),
        )
    )


def _set_count(counts: dict[str, int], key: str, count: int) -> None:
    if count:
        counts[key] = count
    else:
        counts.pop(key, None)


def _decrement(counts: dict[str, int], key: str) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
