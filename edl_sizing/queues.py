"""What a Kueue ClusterQueue still admits, as plain values.

Kueue admits each worker pod of a Deployment labelled ``kueue.x-k8s.io/queue-name`` as a
Workload of its own, against the quota of the ClusterQueue behind that LocalQueue: in each
resource group that covers what the pod requests, the first flavor (in the queue's order)
with room for all of it. A resource the pod requests that no group covers makes it
inadmissible. The sizer never plans a worker the queue would leave waiting
(:class:`QueueQuota`); the adapter computes the room (nominal quota, borrowing, usage) from
the ClusterQueue objects (:mod:`metrics_adapter.sizing.kueue_objects`).

Resource keys are ``cpu``, ``memory``, ``gpu`` (``nvidia.com/gpu``) and ``pods``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edl_sizing.resources import Resources


@dataclass(frozen=True, slots=True)
class FlavorRoom:
    """One flavor of a resource group: what is left of each covered resource."""

    flavor: str
    left: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueGroup:
    """A resource group: the resources it covers and its flavors, in the queue's order."""

    covered: frozenset[str]
    flavors: tuple[FlavorRoom, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """What one ClusterQueue still admits (``name``: the ClusterQueue's)."""

    name: str
    groups: tuple[QueueGroup, ...] = ()

    def choose(self, worker: Resources, pods: int = 1) -> tuple[int, ...] | None:
        """The flavor (index) each group would give one more pod of ``worker``.

        With ``pods``: a workload of that many pods, requesting ``worker`` in all. None
        when the queue would not admit it: a requested resource no group covers, or no
        flavor of a group with room for all of what the group covers.
        """
        need = _needs(worker, pods)
        covered = set().union(*(g.covered for g in self.groups)) if self.groups else set()
        if any(key not in covered for key, amount in need.items() if key != "pods" and amount):
            return None
        picks: list[int] = []
        for group in self.groups:
            wanted = {k: v for k, v in need.items() if k in group.covered and v > 0}
            if not wanted:
                picks.append(-1)
                continue
            pick = next(
                (i for i, f in enumerate(group.flavors) if _fits(wanted, f.left)),
                None,
            )
            if pick is None:
                return None
            picks.append(pick)
        return tuple(picks)

    def admits(self, worker: Resources, pods: int = 1) -> bool:
        """Whether one more pod of ``worker`` (``pods`` requesting it in all) is admitted."""
        return self.choose(worker, pods) is not None

    def moved(
        self, worker: Resources, picks: tuple[int, ...], sign: float, pods: int = 1
    ) -> QueueQuota:
        """The room after one pod of ``worker`` took (sign 1) or gave back (-1) ``picks``."""
        need = _needs(worker, pods)
        groups = []
        for group, pick in zip(self.groups, picks, strict=True):
            if pick < 0:
                groups.append(group)
                continue
            flavors = list(group.flavors)
            f = flavors[pick]
            flavors[pick] = FlavorRoom(
                f.flavor,
                {
                    k: v - sign * need.get(k, 0.0) if k in group.covered else v
                    for k, v in f.left.items()
                },
            )
            groups.append(QueueGroup(group.covered, tuple(flavors)))
        return QueueQuota(self.name, tuple(groups))

    def returned(self, worker: Resources) -> QueueQuota:
        """The room after an admitted pod of ``worker`` leaves.

        Its flavor is not known: the first flavor of each group gets it back (exact for one
        flavor per group).
        """
        need = _needs(worker)
        picks = tuple(
            0 if any(need.get(k, 0.0) > 0 for k in g.covered) and g.flavors else -1
            for g in self.groups
        )
        return self.moved(worker, picks, -1.0)


def _needs(worker: Resources, pods: int = 1) -> dict[str, float]:
    return {"cpu": worker.cpu, "memory": worker.memory, "gpu": worker.gpu, "pods": float(pods)}


@dataclass(frozen=True, slots=True)
class QueueDemand:
    """A workload waiting in a ClusterQueue that has no pod to show yet.

    A batch Job, a JobSet: Kueue admits its ``pods`` pods, requesting ``requests`` in all,
    together.
    """

    key: str
    """``namespace/name`` of its Workload."""
    queue: str
    """The ClusterQueue it waits in."""
    priority: int
    requests: Resources
    pods: int = 1


def _fits(wanted: Mapping[str, float], left: Mapping[str, float]) -> bool:
    for key, amount in wanted.items():
        have = left.get(key, 0.0)
        if amount > have + 1e-9 * max(1.0, abs(have)):
            return False
    return True
