"""The trainer pods the adapter knows about: identity, labels, owners and scrape address."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from metrics_adapter.bounded_cache import POINTER_BYTES, ByteBoundedLRU, estimate_text
from metrics_adapter.kube.selectors import LabelSelector


class PodKey(NamedTuple):
    """A pod's identity: namespace and name."""

    namespace: str
    name: str


class DescribedObject(NamedTuple):
    """A Kubernetes object reference as metric items describe it (``describedObject``)."""

    kind: str
    api_version: str
    name: str
    namespace: str | None = None
    uid: str = ""


@dataclass(frozen=True)
class OwnerRef:
    """An object owning a pod, directly or through a chain (ReplicaSet -> Deployment)."""

    kind: str
    group: str
    name: str
    uid: str = ""

    @property
    def resource(self) -> str:
        """The group-qualified plural the API names it by, e.g. ``deployments.apps``."""
        plural = _PLURALS.get(self.kind, self.kind.lower() + "s")
        return f"{plural}.{self.group}" if self.group else plural

    @property
    def api_version(self) -> str:
        """``apps/v1`` style apiVersion for describedObject."""
        return f"{self.group}/v1" if self.group else "v1"


_PLURALS = {
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "Job": "jobs",
    "DaemonSet": "daemonsets",
    "PaddleJob": "paddlejobs",
}


@dataclass(frozen=True)
class PodTarget:
    """A trainer pod and where its agent serves ``/metrics`` (None: not scraped directly)."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerRef, ...] = ()
    node: str | None = None
    scrape_url: str | None = None
    uid: str = ""
    key: PodKey = field(init=False, compare=False, repr=False)
    """This pod's :class:`PodKey` (computed once)."""
    ref: DescribedObject = field(init=False, compare=False, repr=False)
    """How metric items name this pod (computed once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PodKey(self.namespace, self.name))
        object.__setattr__(
            self, "ref", DescribedObject("Pod", "v1", self.name, self.namespace, self.uid)
        )

    def owned_by(self, resource: str, name: str) -> bool:
        """Whether an owner with this group-qualified resource and name owns the pod."""
        return any(o.resource == resource and o.name == name for o in self.owners)


SELECTIONS_MAX_BYTES = 8 << 20
"""Budget of each of the registry's caches (selections, owner groups): selectors are client
input."""


class PodRegistry:
    """The set of known pods, indexed by namespace; sources replace or patch it.

    Selections and owner groups are cached until the registry changes, each cache within
    `selections_max_bytes` (estimated; least recently used first out).
    """

    def __init__(self, selections_max_bytes: int = SELECTIONS_MAX_BYTES) -> None:
        self._lock = threading.Lock()
        self._by_ns: dict[str, dict[str, PodTarget]] = {}
        self._version = 0
        self._selections: ByteBoundedLRU[tuple[str, str], tuple[int, list[PodTarget]]] = (
            ByteBoundedLRU(selections_max_bytes)
        )
        self._owned: ByteBoundedLRU[tuple[str, str], tuple[int, dict[OwnerRef, list[PodTarget]]]]
        self._owned = ByteBoundedLRU(selections_max_bytes)
        self.synced = False

    @property
    def version(self) -> int:
        """A count that moves whenever the set of pods or any pod's labels or owners change."""
        return self._version

    def replace_all(self, pods: Iterable[PodTarget]) -> list[PodKey]:
        """Make ``pods`` the whole set; returns the keys that disappeared."""
        fresh: dict[str, dict[str, PodTarget]] = {}
        for pod in pods:
            fresh.setdefault(pod.namespace, {})[pod.name] = pod
        with self._lock:
            gone = [
                PodKey(ns, name)
                for ns, by_name in self._by_ns.items()
                for name in by_name
                if name not in fresh.get(ns, {})
            ]
            self._by_ns = fresh
            self._version += 1
            self.synced = True
        return gone

    def upsert(self, pod: PodTarget) -> None:
        """Add or update one pod."""
        with self._lock:
            self._by_ns.setdefault(pod.namespace, {})[pod.name] = pod
            self._version += 1

    def remove(self, key: PodKey) -> None:
        """Forget one pod."""
        with self._lock:
            self._by_ns.get(key.namespace, {}).pop(key.name, None)
            self._version += 1

    def get(self, key: PodKey) -> PodTarget | None:
        """One pod by key."""
        with self._lock:
            return self._by_ns.get(key.namespace, {}).get(key.name)

    def in_namespace(self, namespace: str) -> list[PodTarget]:
        """Pods of one namespace (a snapshot)."""
        with self._lock:
            return list(self._by_ns.get(namespace, {}).values())

    def select(self, namespace: str, selector: LabelSelector) -> list[PodTarget]:
        """Pods of a namespace matching a selector; cached until the registry changes."""
        key = (namespace, str(selector))
        hit = self._selections.get(key)
        with self._lock:
            if hit is not None and hit[0] == self._version:
                return hit[1]
            version = self._version
            pods = list(self._by_ns.get(namespace, {}).values())
        if not selector.empty:
            pods = [p for p in pods if selector.matches(p.labels)]
        size = estimate_text(*key) + POINTER_BYTES * len(pods) + 128
        self._selections.put(key, (version, pods), size)
        return pods

    def owned(self, namespace: str, resource: str) -> dict[OwnerRef, list[PodTarget]]:
        """Pods of a namespace grouped by their owners of one resource.

        ``resource`` is group-qualified (``deployments.apps``); cached until the registry
        changes.
        """
        key = (namespace, "\x00owners:" + resource)
        hit = self._owned.get(key)
        with self._lock:
            if hit is not None and hit[0] == self._version:
                return hit[1]
            version = self._version
            pods = list(self._by_ns.get(namespace, {}).values())
        groups: dict[OwnerRef, list[PodTarget]] = {}
        for pod in pods:
            for owner in pod.owners:
                if owner.resource == resource:
                    groups.setdefault(owner, []).append(pod)
        size = estimate_text(*key) + sum(
            256 + POINTER_BYTES * len(members) for members in groups.values()
        )
        self._owned.put(key, (version, groups), size)
        return groups

    @property
    def cache_bytes(self) -> int:
        """Estimated bytes the selection and owner-group caches hold."""
        return self._selections.bytes + self._owned.bytes

    def all(self) -> list[PodTarget]:
        """Every pod (a snapshot)."""
        with self._lock:
            return [p for by_name in self._by_ns.values() for p in by_name.values()]

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._by_ns.values())
