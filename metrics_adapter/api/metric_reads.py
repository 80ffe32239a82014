"""A custom-metrics read path, as the provider verb it means.

The provider seam (:mod:`metrics_adapter.providers.protocol`) knows custom-metrics-apiserver's
verbs, not HTTP routes; this is the one place a parsed :class:`~metrics_adapter.api.routes.Route`
becomes a verb.
"""

from __future__ import annotations

from metrics_adapter.api.routes import Route, RouteKind
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.providers.protocol import CustomMetricInfo, MetricPoint, MetricsProvider

ALL = "*"
"""The object name that asks for every object matching the selector."""


def custom_metric_values(
    provider: MetricsProvider,
    route: Route,
    selector: LabelSelector,
    metric_selector: LabelSelector,
) -> list[MetricPoint]:
    """A custom-metrics read path, as the provider verb it means.

    ``namespaces/{ns}/{resource}/{name|*}/{metric}`` is by name or by selector in the
    namespace; ``namespaces/{ns}/metrics/{metric}`` is the namespace object itself (by name,
    root-scoped); ``/{resource}/{name|*}/{metric}`` is root-scoped.
    """
    if route.kind is RouteKind.CUSTOM_NAMESPACE:
        info = CustomMetricInfo("namespaces", False, route.metric)
        empty = LabelSelector()
        return [provider.get_metric_by_name(None, route.namespace, info, empty, metric_selector)]
    namespaced = route.kind is RouteKind.CUSTOM_OBJECTS
    namespace = route.namespace if namespaced else None
    info = CustomMetricInfo(route.resource, namespaced, route.metric)
    if route.name == ALL:
        return provider.get_metric_by_selector(namespace, selector, info, metric_selector)
    return [provider.get_metric_by_name(namespace, route.name, info, selector, metric_selector)]
