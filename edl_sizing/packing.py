"""The dry run's state: free room per node and where each job's workers are, mutable.

Nodes are tried in name order (first fit), so the same inputs always give the same plan.
Lookups stay cheap on large clusters: the nodes a pod may use are computed once per
(tolerations, node selector), and a first-fit search resumes where the last one for the
same request stopped (room only shrinks until something is released).
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
        self._candidates: dict[_Shape, list[Node]] = {}
        self._hints: dict[tuple[Resources, _Shape], int] = {}

    def copy(self) -> Packing:
        """An independent copy (a transaction to roll back to)."""
        other = Packing.__new__(Packing)
        other.nodes = self.nodes
        other._candidates = self._candidates
        other._hints = {}
        other.free = {}
        other.restore(self)
        return other

    def restore(self, saved: Packing) -> None:
        """Roll back to a copy taken earlier."""
        self.free = dict(saved.free)
        self.workers = {job: dict(per_node) for job, per_node in saved.workers.items()}
        self.by_node = {node: dict(per_job) for node, per_job in saved.by_node.items()}
        self._hints = {}

    def candidates(
        self, tolerations: tuple[Toleration, ...], node_selector: Mapping[str, str]
    ) -> list[Node]:
        """Nodes a pod with these tolerations and selector may go to, in name order."""
        shape = (tolerations, tuple(sorted(node_selector.items())))
        found = self._candidates.get(shape)
        if found is None:
            found = [n for n in self.nodes if n.accepts(tolerations, node_selector)]
            self._candidates[shape] = found
        return found

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
            allowed = {n.name for n in self.candidates(tolerations, selector)}
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
            per_node = self.workers.setdefault(job, {})
            per_node[node] = per_node.get(node, 0) + 1
            per_job = self.by_node.setdefault(node, {})
            per_job[job] = per_job.get(job, 0) + 1

    def release(self, node: str, requests: Resources, job: str) -> None:
        """Give back the room of one worker of ``job`` on ``node``."""
        self.free[node] = self.free[node] + requests
        self._hints.clear()
        _decrement(self.workers[job], node)
        _decrement(self.by_node[node], job)

    def workers_on(self, job: str, node: str) -> int:
        """Workers of ``job`` placed on ``node``."""
        return self.by_node.get(node, {}).get(job, 0)


def _decrement(counts: dict[str, int], key: str) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
