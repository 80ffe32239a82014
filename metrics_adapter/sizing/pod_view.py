"""The pods' watch store that keeps the round's view of the pods up to date event by event.

A sizing round needs every pod attributed to its job (the first Deployment, by name, whose
selector matches its labels), in key order, and each job's latest pod creation. Built from
scratch that is a selector lookup and a copy per pod: at 150,000 pods most of a round.
:class:`PodView` is the pods' `ReflectorSink` (the records `RecordStore` would keep, in
key order) and remembers each pod's attributed form: a round redoes only the pods that
changed since the last one, and all of them only when the Deployments' selectors changed
(a Deployment added, removed or given another selector; a replica count does not count).
The result is what :func:`~metrics_adapter.sizing.kube_objects.assemble` builds from the
records, by the same function (`attribute`); tests/unit/metrics_adapter/sizing/
test_pod_view.py compares the two after random event sequences.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence

from edl_sizing.cluster import Pod
from metrics_adapter.kube.reflector import KubeObject, object_key
from metrics_adapter.sizing.kube_objects import (
    AttributedPods,
    DeploymentRecord,
    PodRecord,
    SelectorIndex,
    attribute,
    owner_indexes,
)


class PodView:
    """Pod records in key order (a `ReflectorSink`) and their attributed view."""

    def __init__(self, convert: Callable[[KubeObject], PodRecord | None]) -> None:
        self._convert = convert
        self._records: dict[str, PodRecord] = {}
        self._keys: list[str] = []
        self._lock = threading.Lock()
        self._changed: set[str] | None = None
        """Pod keys changed since the last view (None: every pod)."""
        self._selectors: tuple[Hashable, ...] | None = None
        self._owners: dict[str, SelectorIndex] = {}
        self._viewed_keys: list[str] = []
        self._viewed_pods: list[Pod] = []
        """The pods as the view has them (releasing pods left out), in key order: two lists
        side by side (no dict beside them: 150,000 keys cost megabytes), a view is one copy."""
        self._job_of: dict[str, str] = {}
        self._members: dict[str, dict[str, float]] = {}
        """Job key -> its pods' keys -> their creation times."""
        self._pods: tuple[Pod, ...] | None = None
        self.rebuilds = 0
        """Views built from every pod (the first, and after the selectors changed)."""
        self.updated = 0
        """Pods attributed again one by one, in all views."""

    def records(self) -> list[PodRecord]:
        """The current records, in key order (a snapshot)."""
        with self._lock:
            records = self._records
            return [records[k] for k in self._keys]

    def replace(self, objects: Iterable[KubeObject]) -> None:
        """Everything there is (after a list); the old records stay until it is complete."""
        fresh: dict[str, PodRecord] = {}
        for obj in objects:
            record = self._convert(obj)
            if record is not None:
                fresh[object_key(obj)] = record
        keys = sorted(fresh)
        with self._lock:
            self._records, self._keys = fresh, keys
            self._changed, self._pods = None, None

    def apply(self, event_type: str, obj: KubeObject) -> None:
        """One change."""
        record = None if event_type == "DELETED" else self._convert(obj)
        key = object_key(obj)
        with self._lock:
            if record is None:
                if self._records.pop(key, None) is None:
                    return
                del self._keys[bisect.bisect_left(self._keys, key)]
            else:
                if key not in self._records:
                    bisect.insort(self._keys, key)
                self._records[key] = record
            if self._changed is not None:
                self._changed.add(key)

    def attributed(self, deployments: Sequence[DeploymentRecord]) -> AttributedPods:
        """The pods attributed to ``deployments``' jobs, as `assemble` would attribute them."""
        deps = sorted(deployments, key=lambda d: (d.namespace, d.name))
        selectors = tuple((d.namespace, d.name, d.selector) for d in deps)
        with self._lock:
            if selectors != self._selectors or self._changed is None:
                self._rebuild(deps, selectors)
            elif self._changed:
                for key in self._changed:
                    self._update(key)
                self.updated += len(self._changed)
                self._changed.clear()
            if self._pods is None:
                self._pods = tuple(self._viewed_pods)
            growth = {job: max(pods.values()) for job, pods in self._members.items() if pods}
            return AttributedPods(self._pods, growth)

    def _rebuild(self, deps: list[DeploymentRecord], selectors: tuple[Hashable, ...]) -> None:
        self._selectors = selectors
        self._owners = owner_indexes(deps)
        self._job_of, self._members = {}, {}
        self._viewed_keys, self._viewed_pods = [], []
        for key in self._keys:
            self._update(key, appending=True)
        self._changed = set()
        self.rebuilds += 1

    def _update(self, key: str, appending: bool = False) -> None:
        """Pod ``key`` attributed again (or forgotten), its job's members kept with it.

        ``appending``: the keys come in order to empty views (a rebuild).
        """
        self._pods = None
        job = self._job_of.pop(key, None)
        if job is not None:
            members = self._members[job]
            del members[key]
            if not members:
                del self._members[job]
        record = self._records.get(key)
        keys = self._viewed_keys
        at = len(keys) if appending else bisect.bisect_left(keys, key)
        was = at < len(keys) and keys[at] == key
        if record is None or record.releasing:
            if was:
                del keys[at], self._viewed_pods[at]
            return
        pod = attribute(record, self._owners)
        if was:
            self._viewed_pods[at] = pod
        else:
            self._viewed_keys.insert(at, key)
            self._viewed_pods.insert(at, pod)
        if pod.job is not None:
            self._job_of[key] = pod.job
            self._members.setdefault(pod.job, {})[key] = record.created
