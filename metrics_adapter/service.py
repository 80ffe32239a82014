"""ScrapedPodsProvider: the catalogue's metrics, from the pods the sources found and scraped.

It resolves objects to pods (a pod itself, a Deployment's pods, a namespace's, a node's)
and aggregates the pods' values as the catalogue says. It is one
:class:`~metrics_adapter.provider.MetricsProvider` among others.
"""

from __future__ import annotations

from collections.abc import Iterable

from metrics_adapter.catalogue import CatalogueHolder, MetricCatalogue, MetricDefinition
from metrics_adapter.errors import NotFoundError
from metrics_adapter.evaluator import MetricEvaluator, Point
from metrics_adapter.pods import DescribedObject, PodKey, PodRegistry, PodTarget
from metrics_adapter.provider import (
    CustomMetricInfo,
    ExternalMetricInfo,
    ExternalPoint,
    MetricPoint,
)
from metrics_adapter.selector import LabelSelector

_LISTED_RESOURCES = (("pods", True), ("deployments.apps", True), ("namespaces", False))
"""What discovery lists for each custom metric (other owner kinds are served, not listed)."""
_ROOT_RESOURCES = ("namespaces", "nodes")


class ScrapedPodsProvider:
    """Resolves objects to pods and aggregates the pods' values."""

    def __init__(
        self, pods: PodRegistry, evaluator: MetricEvaluator, catalogue: CatalogueHolder
    ) -> None:
        self._pods = pods
        self._evaluator = evaluator
        self._catalogue = catalogue

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
        """Each catalogue metric on pods, Deployments and namespaces."""
        return [
            CustomMetricInfo(resource, namespaced, name)
            for name in sorted(self._catalogue.current.custom)
            for resource, namespaced in _LISTED_RESOURCES
        ]

    def get_external_metric(
        self, namespace: str, metric_selector: LabelSelector, info: ExternalMetricInfo
    ) -> list[ExternalPoint]:
        """One item aggregating the namespace's pods that ``metric_selector`` matches."""
        catalogue = self._catalogue.current
        definition = catalogue.external.get(info.metric)
        if definition is None:
            raise NotFoundError(f"the server could not find the external metric {info.metric}")
        pods = self._pods.select(namespace, metric_selector)
        values = self._values(definition, pods, LabelSelector(), catalogue.generation)
        if not values:
            return []
        points = [v for _, v in values]
        return [
            ExternalPoint(
                definition.name,
                metric_selector.equality_labels(),
                definition.aggregation.apply([p.value for p in points]),
                max(p.timestamp for p in points),
                definition.window_seconds,
            )
        ]

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
        if namespace is None:
            return self._root(resource, name, definition, selector, metric_selector, catalogue)
        if resource == "pods":
            return self._pod_values(
                namespace, name, definition, selector, metric_selector, catalogue
            )
        return self._owners(
            namespace, resource, name, definition, selector, metric_selector, catalogue
        )

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
        values = self._values(definition, candidates, metric_selector, catalogue.generation)
        return [MetricPoint(pod.ref, definition, p.value, p.timestamp) for pod, p in values]

    def _owners(
        self,
        namespace: str,
        resource: str,
        name: str | None,
        definition: MetricDefinition,
        selector: LabelSelector,
        metric_selector: LabelSelector,
        catalogue: MetricCatalogue,
    ) -> list[MetricPoint]:
        """``namespaces/{ns}/{resource.group}/{name|*}/{metric}``: pods aggregated per owner.

        A labelSelector selects the owner when at least one of its pods matches it (the
        adapter knows pods' labels, not owners').
        """
        owned = self._pods.owned(namespace, resource)
        if name is not None:
            owned = {owner: pods for owner, pods in owned.items() if owner.name == name}
        items = []
        for owner, members in sorted(owned.items(), key=lambda kv: kv[0].name):
            if not any(selector.matches(p.labels) for p in members):
                continue
            values = self._values(definition, members, metric_selector, catalogue.generation)
            if values:
                described = DescribedObject(
                    owner.kind, owner.api_version, owner.name, namespace, owner.uid
                )
                items.append(_aggregate(described, definition, [v for _, v in values]))
        return items

    def _root(
        self,
        resource: str,
        name: str | None,
        definition: MetricDefinition,
        selector: LabelSelector,
        metric_selector: LabelSelector,
        catalogue: MetricCatalogue,
    ) -> list[MetricPoint]:
        """Root-scoped ``namespaces`` and ``nodes``: their pods aggregated."""
        groups: dict[str, list[PodTarget]] = {}
        for pod in self._pods.all():
            group = pod.namespace if resource == "namespaces" else pod.node
            if group is not None and (name is None or group == name):
                if resource == "namespaces" or selector.matches(pod.labels):
                    groups.setdefault(group, []).append(pod)
        kind = "Namespace" if resource == "namespaces" else "Node"
        items = []
        for group, members in sorted(groups.items()):
            values = self._values(definition, members, metric_selector, catalogue.generation)
            if values:
                described = DescribedObject(kind, "v1", group)
                items.append(_aggregate(described, definition, [v for _, v in values]))
        return items


def _aggregate(
    described: DescribedObject, definition: MetricDefinition, points: list[Point]
) -> MetricPoint:
    return MetricPoint(
        described,
        definition,
        definition.aggregation.apply([p.value for p in points]),
        max(p.timestamp for p in points),
    )
