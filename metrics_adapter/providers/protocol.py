"""The provider seam: what answers the metrics APIs, named after custom-metrics-apiserver's verbs.

custom-metrics-apiserver (``pkg/provider/interfaces.go``) splits an adapter into an API
server and a provider of five methods; so does this one. The API room
(:mod:`metrics_adapter.api`) parses paths and renders the wire format (turning a path into
one of these verbs: :mod:`metrics_adapter.api.metric_reads`); a :class:`MetricsProvider`
answers:

* ``get_metric_by_name``: one object's value (``.../pods/trainer-0/samples_per_second``);
* ``get_metric_by_selector``: every matching object's (``.../pods/*/samples_per_second``);
* ``list_all_metrics``: the custom metrics it serves, per resource (discovery);
* ``get_external_metric``: ``external.metrics.k8s.io`` items for a namespace and selector;
* ``list_all_external_metrics``: the external metrics it serves (discovery).

The scraped-pods provider (:class:`metrics_adapter.providers.scraped_pods.ScrapedPodsProvider`)
serves
the catalogue's metrics; the sizer's plan (:mod:`metrics_adapter.providers.sizing`) serves
``desired_replicas``; :class:`CompositeProvider` serves several, each metric from the
provider that lists it, and discovery (``/apis/<group>/<version>``) is generated from the
lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from metrics_adapter.errors import NotFoundError
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.scraping.catalogue import MetricDefinition
from metrics_adapter.scraping.pod_registry import DescribedObject


class MetricPoint:
    """One item of a MetricValueList.

    ``rendered`` holds the item's JSON per API version once the renderer has written it: the
    scraped-pods provider keeps each pod's point until that pod's next scrape, so a list read
    again (the HPA every sync, dashboards) is joined from text written once per scrape.
    """

    __slots__ = ("definition", "described", "rendered", "timestamp", "value")

    def __init__(
        self,
        described: DescribedObject,
        definition: MetricDefinition,
        value: float,
        timestamp: float,
    ) -> None:
        self.described = described
        self.definition = definition
        self.value = value
        self.timestamp = timestamp
        self.rendered: dict[str, bytes] | None = None

    def _fields(self) -> tuple[DescribedObject, MetricDefinition, float, float]:
        return self.described, self.definition, self.value, self.timestamp

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetricPoint) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"MetricPoint({self.described!r}, {self.definition.name!r}, {self.value!r}, "
            f"{self.timestamp!r})"
        )


@dataclass(frozen=True)
class ExternalPoint:
    """One item of an ExternalMetricValueList."""

    metric: str
    labels: dict[str, str]
    value: float
    timestamp: float
    window_seconds: float


@dataclass(frozen=True)
class CustomMetricInfo:
    """A custom metric on one kind of object (``CustomMetricInfo`` upstream)."""

    group_resource: str
    """``pods``, ``deployments.apps``, ``namespaces``, ``nodes``..."""
    namespaced: bool
    metric: str


@dataclass(frozen=True)
class ExternalMetricInfo:
    """An external metric (``ExternalMetricInfo`` upstream)."""

    metric: str


class MetricsProvider(Protocol):
    """Answers the custom and external metrics APIs."""

    def get_metric_by_name(
        self,
        namespace: str | None,
        name: str,
        info: CustomMetricInfo,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> MetricPoint:
        """One object's value (``selector``, when not empty, must match it too).

        Raises:
            NotFoundError: no such object or no fresh value.
        """
        ...

    def get_metric_by_selector(
        self,
        namespace: str | None,
        selector: LabelSelector,
        info: CustomMetricInfo,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """Every matching object's value (``namespace`` None: root-scoped objects).

        The list is never changed once returned: the same list may be answered again while
        nothing it rests on changed (and its rendered body kept with it).
        """
        ...

    def list_all_metrics(self) -> list[CustomMetricInfo]:
        """The custom metrics served, for discovery."""
        ...

    def get_external_metric(
        self, namespace: str, metric_selector: LabelSelector, info: ExternalMetricInfo
    ) -> list[ExternalPoint]:
        """The external metric's items for a namespace and selector."""
        ...

    def list_all_external_metrics(self) -> list[ExternalMetricInfo]:
        """The external metrics served, for discovery."""
        ...


class CompositeProvider:
    """Several providers as one: each metric comes from the first provider that lists it."""

    def __init__(self, providers: Sequence[MetricsProvider]) -> None:
        self.providers = list(providers)

    def _custom_owner(self, metric: str, resource: str) -> MetricsProvider:
        for provider in self.providers:
            if any(i.metric == metric for i in provider.list_all_metrics()):
                return provider
        raise NotFoundError(f"the server could not find the metric {metric} for {resource}")

    def get_metric_by_name(
        self,
        namespace: str | None,
        name: str,
        info: CustomMetricInfo,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> MetricPoint:
        """From the provider serving ``info.metric``."""
        owner = self._custom_owner(info.metric, info.group_resource)
        return owner.get_metric_by_name(namespace, name, info, selector, metric_selector)

    def get_metric_by_selector(
        self,
        namespace: str | None,
        selector: LabelSelector,
        info: CustomMetricInfo,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """From the provider serving ``info.metric``."""
        owner = self._custom_owner(info.metric, info.group_resource)
        return owner.get_metric_by_selector(namespace, selector, info, metric_selector)

    def list_all_metrics(self) -> list[CustomMetricInfo]:
        """Every provider's list, in provider order, without repeats."""
        seen: dict[CustomMetricInfo, None] = {}
        for provider in self.providers:
            seen.update(dict.fromkeys(provider.list_all_metrics()))
        return list(seen)

    def get_external_metric(
        self, namespace: str, metric_selector: LabelSelector, info: ExternalMetricInfo
    ) -> list[ExternalPoint]:
        """From the first provider listing ``info.metric``."""
        for provider in self.providers:
            if info in provider.list_all_external_metrics():
                return provider.get_external_metric(namespace, metric_selector, info)
        raise NotFoundError(f"the server could not find the external metric {info.metric}")

    def list_all_external_metrics(self) -> list[ExternalMetricInfo]:
        """Every provider's list, in provider order, without repeats."""
        seen: dict[ExternalMetricInfo, None] = {}
        for provider in self.providers:
            seen.update(dict.fromkeys(provider.list_all_external_metrics()))
        return list(seen)
