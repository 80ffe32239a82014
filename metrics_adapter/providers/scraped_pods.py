"""ScrapedPodsProvider: the catalogue's metrics, from the pods the sources found and scraped.

It resolves objects to pods (a pod itself, a Deployment's pods, a namespace's, a node's)
and aggregates the pods' values as the catalogue says. It is one
:class:`~metrics_adapter.providers.protocol.MetricsProvider` among others.

Reads are cheap when nothing changed: each pod's item is kept with its value until the pod's
next scrape (the renderer keeps its JSON on it), and a whole answer is kept while the pods,
their data and the catalogue stand still and none of its values has gone stale
(:class:`AnswerCache`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from metrics_adapter.bounded_cache import POINTER_BYTES, ByteBoundedLRU, estimate_text
from metrics_adapter.errors import NotFoundError
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.providers.protocol import (
    CustomMetricInfo,
    ExternalMetricInfo,
    ExternalPoint,
    MetricPoint,
)
from metrics_adapter.scraping.catalogue import CatalogueHolder, MetricCatalogue, MetricDefinition
from metrics_adapter.scraping.evaluator import MetricEvaluator
from metrics_adapter.scraping.pod_registry import DescribedObject, PodKey, PodRegistry, PodTarget
from metrics_adapter.scraping.window import Point

T = TypeVar("T")

_LISTED_RESOURCES = (("pods", True), ("deployments.apps", True), ("namespaces", False))
"""What discovery lists for each custom metric (other owner kinds are served, not listed)."""
_ROOT_RESOURCES = ("namespaces", "nodes")


ANSWERS_MAX_BYTES = 48 << 20
"""The custom-metrics answer cache's budget: its keys hold client input (selectors)."""
EXTERNAL_ANSWERS_MAX_BYTES = 4 << 20
"""The external-metrics answer cache's budget."""
POINT_BYTES = 1536
"""One answer item at most: the point, its object reference, its JSON in both versions."""


class AnswerCache(Generic[T]):
    """Answers kept while what they rest on stands still, and until their oldest value stales.

    An entry is valid while its ``stamp`` (pod registry version, store change count,
    catalogue) equals the current one and the clock is before its expiry; one found invalid
    is dropped at once. Bounded in bytes (`ByteBoundedLRU`, sizes estimated by the caller),
    so distinct selectors push out the least recently used answers, never past `max_bytes`.
    """

    def __init__(self, max_bytes: int = ANSWERS_MAX_BYTES) -> None:
        self._entries: ByteBoundedLRU[Hashable, tuple[Hashable, float, T]] = ByteBoundedLRU(
            max_bytes
        )

    def get(self, key: Hashable, stamp: Hashable, now: float) -> T | None:
        """The kept answer, or None when there is none or it no longer holds."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[0] != stamp or now >= hit[1]:
            self._entries.pop(key)
            return None
        return hit[2]

    def put(self, key: Hashable, stamp: Hashable, expires: float, answer: T, size: int) -> None:
        """Keep ``answer``, computed from the state ``stamp`` names (taken before computing).

        ``size``: the answer's estimated bytes with its key (`answer_bytes`).
        """
        self._entries.put(key, (stamp, expires, answer), size)

    @property
    def bytes(self) -> int:
        """Estimated bytes held."""
        return self._entries.bytes

    def __len__(self) -> int:
        return len(self._entries)


def answer_bytes(key: tuple[str | None, ...], items: int) -> int:
    """An answer of `items` items under `key`, estimated high."""
    return estimate_text(*key) + items * (POINTER_BYTES + POINT_BYTES) + 128


class ScrapedPodsProvider:
    """Resolves objects to pods and aggregates the pods' values."""

    def __init__(
        self,
        pods: PodRegistry,
        evaluator: MetricEvaluator,
        catalogue: CatalogueHolder,
        answers_max_bytes: int = ANSWERS_MAX_BYTES,
    ) -> None:
        self._pods = pods
        self._evaluator = evaluator
        self._catalogue = catalogue
        self._answers: AnswerCache[list[MetricPoint]] = AnswerCache(answers_max_bytes)
        self._external: AnswerCache[list[ExternalPoint]] = AnswerCache(EXTERNAL_ANSWERS_MAX_BYTES)
        self._listed: tuple[MetricCatalogue | None, list[CustomMetricInfo]] = (None, [])

    @property
    def cache_bytes(self) -> int:
        """Estimated bytes the answer caches hold."""
        return self._answers.bytes + self._external.bytes

    def _stamp(self, catalogue: MetricCatalogue) -> tuple[int, int, MetricCatalogue]:
        return (self._pods.version, self._evaluator.store.changes, catalogue)

    def _expiry(self, oldest: float) -> float:
        """When an answer whose oldest value is from ``oldest`` stops holding."""
        return oldest + self._evaluator.stale_after

    # ---- the provider verbs ----------------------------------------------------------------

    def get_metric_by_name(
        self,
        namespace: str | None,
        name: str,
        info: CustomMetricInfo,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> MetricPoint:
        """One pod, owner, namespace or node."""
        items = self._read(namespace, name, info, selector, metric_selector)
        if not items:
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for {info.group_resource} "
                f"{name}"
            )
        return items[0]

    def get_metric_by_selector(
        self,
        namespace: str | None,
        selector: LabelSelector,
        info: CustomMetricInfo,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """Every pod (owner, namespace, node) of the namespace matching ``selector``."""
        return self._read(namespace, None, info, selector, metric_selector)

    def list_all_metrics(self) -> list[CustomMetricInfo]:
        """Each catalogue metric on pods, Deployments and namespaces (kept per catalogue)."""
        catalogue = self._catalogue.current
        kept, listed = self._listed
        if kept is not catalogue:
            listed = [
                CustomMetricInfo(resource, namespaced, name)
                for name in sorted(catalogue.custom)
                for resource, namespaced in _LISTED_RESOURCES
            ]
            self._listed = (catalogue, listed)
        return listed

    def get_external_metric(
        self, namespace: str, metric_selector: LabelSelector, info: ExternalMetricInfo
    ) -> list[ExternalPoint]:
        """One item aggregating the namespace's pods that ``metric_selector`` matches."""
        catalogue = self._catalogue.current
        definition = catalogue.external.get(info.metric)
        if definition is None:
            raise NotFoundError(f"the server could not find the external metric {info.metric}")
        stamp, now = self._stamp(catalogue), self._evaluator.now()
        key = (namespace, info.metric, str(metric_selector))
        kept = self._external.get(key, stamp, now)
        if kept is not None:
            return kept
        pods = self._pods.select(namespace, metric_selector)
        values = self._values(definition, pods, LabelSelector(), catalogue.generation)
        answer: list[ExternalPoint] = []
        oldest = math.inf
        if values:
            points = [v for _, v in values]
            oldest = min(p.timestamp for p in points)
            answer.append(
                ExternalPoint(
                    definition.name,
                    metric_selector.equality_labels(),
                    definition.aggregation.apply([p.value for p in points]),
                    max(p.timestamp for p in points),
                    definition.window_seconds,
                )
            )
        self._external.put(key, stamp, self._expiry(oldest), answer, answer_bytes(key, 1))
        return answer

    def list_all_external_metrics(self) -> list[ExternalMetricInfo]:
        """The catalogue's external metrics."""
        return [ExternalMetricInfo(name) for name in sorted(self._catalogue.current.external)]

    def catalogue(self) -> MetricCatalogue:
        """The catalogue in force."""
        return self._catalogue.current

    # ---- resolution ------------------------------------------------------------------------

    def _read(
        self,
        namespace: str | None,
        name: str | None,
        info: CustomMetricInfo,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        catalogue = self._catalogue.current
        resource = info.group_resource
        if namespace is None and resource not in _ROOT_RESOURCES:
            raise NotFoundError(
                f"the server could not find the requested resource {resource} "
                "(root-scoped metrics are served for namespaces and nodes)"
            )
        definition = catalogue.custom.get(info.metric)
        if definition is None:
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for {resource}"
            )
        stamp, now = self._stamp(catalogue), self._evaluator.now()
        key = (namespace, resource, name, info.metric, str(selector), str(metric_selector))
        kept = self._answers.get(key, stamp, now)
        if kept is not None:
            return kept
        if namespace is None:
            items, oldest = self._root(
                resource, name, definition, selector, metric_selector, catalogue
            )
        elif resource == "pods":
            items = self._pod_values(
                namespace, name, definition, selector, metric_selector, catalogue
            )
            oldest = min((p.timestamp for p in items), default=math.inf)
        else:
            items, oldest = self._owners(
                namespace, resource, name, definition, selector, metric_selector, catalogue
            )
        self._answers.put(key, stamp, self._expiry(oldest), items, answer_bytes(key, len(items)))
        return items

    def _values(
        self,
        definition: MetricDefinition,
        pods: Iterable[PodTarget],
        metric_selector: LabelSelector,
        generation: int,
    ) -> list[tuple[PodTarget, Point]]:
        pods = list(pods)
        points = self._evaluator.pod_values(
            definition, [p.key for p in pods], metric_selector, generation
        )
        return [(pod, point) for pod, point in zip(pods, points, strict=True) if point is not None]

    def _pod_values(
        self,
        namespace: str,
        name: str | None,
        definition: MetricDefinition,
        selector: LabelSelector,
        metric_selector: LabelSelector,
        catalogue: MetricCatalogue,
    ) -> list[MetricPoint]:
        """``namespaces/{ns}/pods/{name|*}/{metric}``: one item per pod with a fresh value."""
        if name is None:
            candidates = self._pods.select(namespace, selector)
        else:
            pod = self._pods.get(PodKey(namespace, name))
            candidates = [pod] if pod is not None and selector.matches(pod.labels) else []
        if not candidates:
            return []
        evaluator = self._evaluator
        generation = catalogue.generation
        by_key: dict[PodKey, PodTarget] = {}

        def item(key: PodKey) -> MetricPoint | None:
            if not by_key:
                by_key.update((p.key, p) for p in candidates)
            point = evaluator.pod_value(definition, key, metric_selector, generation)
            if point is None:
                return None
            return MetricPoint(by_key[key].ref, definition, point.value, point.timestamp)

        # The item itself is kept with the pod's data until its next scrape (the renderer
        # keeps its JSON on it); only freshness is checked per read.
        memo_key = ("item", generation, definition.name, str(metric_selector))
        kept = evaluator.store.memoized_batch([p.key for p in candidates], memo_key, item)
        horizon = evaluator.now() - evaluator.stale_after
        items = []
        for pod, point in zip(candidates, kept, strict=True):
            if not isinstance(point, MetricPoint) or point.timestamp < horizon:
                continue
            if point.described is not pod.ref:  # the pod object changed since the scrape
                point = MetricPoint(pod.ref, definition, point.value, point.timestamp)
            items.append(point)
        return items

    def _owners(
        self,
        namespace: str,
        resource: str,
        name: str | None,
        definition: MetricDefinition,
        selector: LabelSelector,
        metric_selector: LabelSelector,
        catalogue: MetricCatalogue,
    ) -> tuple[list[MetricPoint], float]:
        """``namespaces/{ns}/{resource.group}/{name|*}/{metric}``: pods aggregated per owner.

        A labelSelector selects the owner when at least one of its pods matches it (the
        adapter knows pods' labels, not owners').
        """
        owned = self._pods.owned(namespace, resource)
        if name is not None:
            owned = {owner: pods for owner, pods in owned.items() if owner.name == name}
        items = []
        oldest = math.inf
        for owner, members in sorted(owned.items(), key=lambda kv: kv[0].name):
            if not selector.empty and not any(selector.matches(p.labels) for p in members):
                continue
            values = self._values(definition, members, metric_selector, catalogue.generation)
            if values:
                described = DescribedObject(
                    owner.kind, owner.api_version, owner.name, namespace, owner.uid
                )
                item, first = _aggregate(described, definition, [v for _, v in values])
                items.append(item)
                oldest = min(oldest, first)
        return items, oldest

    def _root(
        self,
        resource: str,
        name: str | None,
        definition: MetricDefinition,
        selector: LabelSelector,
        metric_selector: LabelSelector,
        catalogue: MetricCatalogue,
    ) -> tuple[list[MetricPoint], float]:
        """Root-scoped ``namespaces`` and ``nodes``: their pods aggregated."""
        groups: dict[str, list[PodTarget]] = {}
        for pod in self._pods.all():
            group = pod.namespace if resource == "namespaces" else pod.node
            if group is not None and (name is None or group == name):
                if resource == "namespaces" or selector.matches(pod.labels):
                    groups.setdefault(group, []).append(pod)
        kind = "Namespace" if resource == "namespaces" else "Node"
        items = []
        oldest = math.inf
        for group, members in sorted(groups.items()):
            values = self._values(definition, members, metric_selector, catalogue.generation)
            if values:
                described = DescribedObject(kind, "v1", group)
                item, first = _aggregate(described, definition, [v for _, v in values])
                items.append(item)
                oldest = min(oldest, first)
        return items, oldest


def _aggregate(
    described: DescribedObject, definition: MetricDefinition, points: list[Point]
) -> tuple[MetricPoint, float]:
    """The aggregated item and the time of its oldest value (when it starts to stale)."""
    item = MetricPoint(
        described,
        definition,
        definition.aggregation.apply([p.value for p in points]),
        max(p.timestamp for p in points),
    )
    return item, min(p.timestamp for p in points)
