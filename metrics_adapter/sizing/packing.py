"""The dry run's state: free room per node and where each job's workers are, mutable.

Nodes are tried in name order (first fit), so the same inputs always give the same plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from metrics_adapter.sizing.cluster import Node, Toleration
from metrics_adapter.sizing.resources import Resources


class Packing:
    """Free room of the nodes new pods may use, and job workers per node."""

    def __init__(self, nodes: Sequence[Node], free: Mapping[str, Resources]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.free = dict(free)
        self.workers: dict[str, dict[str, int]] = {}
        """job key -> node name -> workers of the job on that node."""

    def copy(self) -> Packing:
        """An independent copy (a transaction to roll back to)."""
        other = Packing.__new__(Packing)
        other.nodes = self.nodes
        other.free = dict(self.free)
        other.workers = {job: dict(per_node) for job, per_node in self.workers.items()}
        return other

    def restore(self, saved: Packing) -> None:
        """Roll back to a copy taken earlier."""
        self.free = dict(saved.free)
        self.workers = {job: dict(per_node) for job, per_node in saved.workers.items()}

    def candidates(
        self, tolerations: tuple[Toleration, ...], node_selector: Mapping[str, str]
    ) -> list[Node]:
        """Nodes a pod with these tolerations and selector may go to, in name order."""
        return [n for n in self.nodes if n.accepts(tolerations, node_selector)]

    def first_fit(
        self,
        requests: Resources,
        tolerations: tuple[Toleration, ...] = (),
        node_selector: Mapping[str, str] | None = None,
    ) -> str | None:
        """The first node (by name) with room for ``requests``, or None."""
        for node in self.candidates(tolerations, node_selector or {}):
            if requests.fits_in(self.free[node.name]):
                return node.name
        return None

    def place(self, node: str, requests: Resources, job: str | None = None) -> None:
        """Take room on ``node`` (for a worker of ``job`` when given)."""
        self.free[node] = self.free[node] - requests
        if job is not None:
            per_node = self.workers.setdefault(job, {})
            per_node[node] = per_node.get(node, 0) + 1

    def release(self, node: str, requests: Resources, job: str) -> None:
        """Give back the room of one worker of ``job`` on ``node``."""
        self.free[node] = self.free[node] + requests
        per_node = self.workers[job]
        per_node[node] -= 1
        if not per_node[node]:
            del per_node[node]

    def workers_on(self, job: str, node: str) -> int:
        """Workers of ``job`` placed on ``node``."""
        return self.workers.get(job, {}).get(node, 0)
