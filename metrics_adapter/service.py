"""MetricsService: answers the API's questions (which objects, which values) from pods + store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from metrics_adapter.catalogue import CatalogueHolder, MetricCatalogue, MetricDefinition
from metrics_adapter.errors import NotFoundError
from metrics_adapter.evaluator import MetricEvaluator, Point
from metrics_adapter.pods import DescribedObject, PodKey, PodRegistry, PodTarget
from metrics_adapter.selector import LabelSelector

ALL = "*"


class MetricPoint(NamedTuple):
    """One item of a MetricValueList."""

    described: DescribedObject
    definition: MetricDefinition
    value: float
    timestamp: float


@dataclass(frozen=True)
class ExternalPoint:
    """One item of an ExternalMetricValueList."""

    definition: MetricDefinition
    labels: dict[str, str]
    value: float
    timestamp: float


class MetricsService:
    """Resolves objects to pods and aggregates the pods' values."""

    def __init__(
        self, pods: PodRegistry, evaluator: MetricEvaluator, catalogue: CatalogueHolder
    ) -> None:
        self._pods = pods
        self._evaluator = evaluator
        self._catalogue = catalogue

    def _custom(self, catalogue: MetricCatalogue, metric: str, resource: str) -> MetricDefinition:
        definition = catalogue.custom.get(metric)
        if definition is None:
            raise NotFoundError(f"the server could not find the metric {metric} for {resource}")
        return definition

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

    def pods(
        self,
        namespace: str,
        name: str,
        metric: str,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """``namespaces/{ns}/pods/{name|*}/{metric}``: one item per pod with a fresh value."""
        catalogue = self._catalogue.current
        definition = self._custom(catalogue, metric, "pods")
        if name == ALL:
            candidates = self._pods.select(namespace, selector)
        else:
            pod = self._pods.get(PodKey(namespace, name))
            candidates = [pod] if pod is not None and selector.matches(pod.labels) else []
        values = self._values(definition, candidates, metric_selector, catalogue.generation)
        if name != ALL and not values:
            raise NotFoundError(f"the server could not find the metric {metric} for pods {name}")
        return [
            MetricPoint(
                pod.ref,
                definition,
                point.value,
                point.timestamp,
            )
            for pod, point in values
        ]

    def objects(
        self,
        namespace: str,
        resource: str,
        name: str,
        metric: str,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """``namespaces/{ns}/{resource.group}/{name|*}/{metric}``: pods aggregated per owner.

        A labelSelector selects the owner when at least one of its pods matches it (the
        adapter knows pods' labels, not owners').
        """
        catalogue = self._catalogue.current
        definition = self._custom(catalogue, metric, resource)
        owned = self._pods.owned(namespace, resource)
        if name == ALL:
            groups = owned
        else:
            groups = {owner: pods for owner, pods in owned.items() if owner.name == name}
        items = []
        for owner, members in sorted(groups.items(), key=lambda kv: kv[0].name):
            if not any(selector.matches(p.labels) for p in members):
                continue
            values = self._values(definition, members, metric_selector, catalogue.generation)
            if not values:
                continue
            described = DescribedObject(
                owner.kind, owner.api_version, owner.name, namespace, owner.uid
            )
            items.append(_aggregate(described, definition, [v for _, v in values]))
        if name != ALL and not items:
            raise NotFoundError(
                f"the server could not find the metric {metric} for {resource} {name}"
            )
        return items

    def namespace(
        self, namespace: str, metric: str, metric_selector: LabelSelector
    ) -> list[MetricPoint]:
        """``namespaces/{ns}/metrics/{metric}``: all pods of the namespace, aggregated."""
        catalogue = self._catalogue.current
        definition = self._custom(catalogue, metric, "namespaces")
        values = self._values(
            definition, self._pods.in_namespace(namespace), metric_selector, catalogue.generation
        )
        if not values:
            raise NotFoundError(
                f"the server could not find the metric {metric} for namespaces {namespace}"
            )
        described = DescribedObject("Namespace", "v1", namespace)
        return [_aggregate(described, definition, [v for _, v in values])]

    def root(
        self,
        resource: str,
        name: str,
        metric: str,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """Root-scoped ``/{resource}/{name|*}/{metric}``: ``namespaces`` and ``nodes``."""
        catalogue = self._catalogue.current
        if resource not in ("namespaces", "nodes"):
            raise NotFoundError(
                f"the server could not find the requested resource {resource} "
                "(root-scoped metrics are served for namespaces and nodes)"
            )
        definition = self._custom(catalogue, metric, resource)
        groups: dict[str, list[PodTarget]] = {}
        for pod in self._pods.all():
            group = pod.namespace if resource == "namespaces" else pod.node
            if group is not None and (name == ALL or group == name):
                if resource == "namespaces" or selector.matches(pod.labels):
                    groups.setdefault(group, []).append(pod)
        kind = "Namespace" if resource == "namespaces" else "Node"
        items = []
        for group, members in sorted(groups.items()):
            values = self._values(definition, members, metric_selector, catalogue.generation)
            if values:
                items.append(
                    _aggregate(
                        DescribedObject(kind, "v1", group), definition, [v for _, v in values]
                    )
                )
        if name != ALL and not items:
            raise NotFoundError(
                f"the server could not find the metric {metric} for {resource} {name}"
            )
        return items

    def external(self, namespace: str, metric: str, selector: LabelSelector) -> list[ExternalPoint]:
        """``external.metrics.k8s.io``: one item aggregating the namespace's matching pods."""
        catalogue = self._catalogue.current
        definition = catalogue.external.get(metric)
        if definition is None:
            raise NotFoundError(f"the server could not find the external metric {metric}")
        pods = self._pods.select(namespace, selector)
        values = self._values(definition, pods, LabelSelector(), catalogue.generation)
        if not values:
            return []
        points = [v for _, v in values]
        return [
            ExternalPoint(
                definition,
                selector.equality_labels(),
                definition.aggregation.apply([p.value for p in points]),
                max(p.timestamp for p in points),
            )
        ]

    def catalogue(self) -> MetricCatalogue:
        """The catalogue in force (for discovery)."""
        return self._catalogue.current


def _aggregate(
    described: DescribedObject, definition: MetricDefinition, points: list[Point]
) -> MetricPoint:
    return MetricPoint(
        described,
        definition,
        definition.aggregation.apply([p.value for p in points]),
        max(p.timestamp for p in points),
    )
