"""The dry run's state: free room per node and where each job's workers are, mutable.

Nodes are tried in name order (first fit), so the same inputs always give the same plan.
Lookups stay cheap on large clusters: the nodes a pod may use are computed once per
(tolerations, node selector), and a first-fit search resumes where the last one for the
same request stopped (room only shrinks until something is released). A search for room
to make (`reclaimable`) skips the nodes where even every job worker's room would not be
enough: that bound (free room plus the workers' room) only shrinks during a round, so the
nodes left for one request are kept and filtered further, not found again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from edl_sizing.cluster import Node, Toleration
from edl_sizing.resources import Resources

_Shape = tuple[tuple[Toleration, ...], tuple[tuple[str, str], ...]]


class Packing:
    """Free room of the nodes new pods may use, and job workers per node."""

    def __init__(self, nodes: Sequence[Node], free: Mapping[str, Resources]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.free = dict(free)
        self.workers: dict[str, dict[str, int]] = {}
        """job key -> node name -> workers of the job on that node."""
        self.by_node: dict[str, dict[str, int]] = {}
        """node name -> job key -> workers of the job on that node."""
        self._candidates: dict[_Shape, tuple[list[Node], frozenset[str]]] = {}
        self._hints: dict[tuple[Resources, _Shape], int] = {}
        self.worker_room: dict[str, Resources] = {}
        """node name -> the room of the job workers placed there (with `free`: the most that
        removing workers could free, which only pods placed without a job lower)."""
        self._reclaimable: dict[tuple[Resources, _Shape], list[Node]] = {}

    def copy(self) -> Packing:
        """An independent copy (a transaction to roll back to)."""
        other = Packing.__new__(Packing)
        other.nodes = self.nodes
        other._candidates = self._candidates
        other._hints = {}
        other._reclaimable = {}
        other.free = {}
        other.restore(self)
        return other

    def restore(self, saved: Packing) -> None:
        """Roll back to a copy taken earlier."""
        self.free = dict(saved.free)
        self.workers = {job: dict(per_node) for job, per_node in saved.workers.items()}
        self.by_node = {node: dict(per_job) for node, per_job in saved.by_node.items()}
        self.worker_room = dict(saved.worker_room)
        self._hints = {}
        self._reclaimable = {}

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
        found = self._reclaimable.get(key)
        if found is None:
            found = self.candidates(tolerations, node_selector)
        found = [n for n in found if _could_fit(requests, self._reclaim(n.name))]
        self._reclaimable[key] = found
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
        hint_key = (requests, (tolerations, tuple(sorted(selector.items()))))
        start = self._hints.get(hint_key, 0)
        for i in range(start, len(nodes)):
            if requests.fits_in(self.free[nodes[i].name]):
                self._hints[hint_key] = i
                return nodes[i].name
        self._hints[hint_key] = len(nodes)
        return None

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
        """The node with room for the most pods of ``requests`` (first by name on a tie)."""
        best: tuple[float, str] | None = None
        for node in self.candidates(tolerations, node_selector or {}):
            free = self.free[node.name]
            if not requests.fits_in(free):
                continue
            pairs = ((requests.cpu, free.cpu), (requests.memory, free.memory),
                     (requests.gpu, free.gpu))  # fmt: skip
            count = min((have / need for need, have in pairs if need > 0), default=0.0)
            if best is None or count > best[0] + 1e-9:
                best = (count, node.name)
        return best[1] if best is not None else None

    def place(self, node: str, requests: Resources, job: str | None = None) -> None:
        """Take room on ``node`` (for a worker of ``job`` when given)."""
        self.free[node] = self.free[node] - requests
        if job is not None:
            room = self.worker_room.get(node)
            self.worker_room[node] = requests if room is None else room + requests
            per_node = self.workers.setdefault(job, {})
            per_node[node] = per_node.get(node, 0) + 1
            per_job = self.by_node.setdefault(node, {})
            per_job[job] = per_job.get(job, 0) + 1

    def release(self, node: str, requests: Resources, job: str) -> None:
        """Give back the room of one worker of ``job`` on ``node``."""
        self.free[node] = self.free[node] + requests
        self.worker_room[node] = self.worker_room[node] - requests
        self._hints.clear()
        _decrement(self.workers[job], node)
        _decrement(self.by_node[node], job)

    def workers_on(self, job: str, node: str) -> int:
        """Workers of ``job`` placed on ``node``."""
        return self.by_node.get(node, {}).get(job, 0)


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


def _decrement(counts: dict[str, int], key: str) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
