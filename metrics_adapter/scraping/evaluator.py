"""MetricEvaluator: one API metric's value for one pod, from the store's windows."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.scraping.catalogue import MetricDefinition, SeriesTerm
from metrics_adapter.scraping.pod_registry import PodKey
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.scraping.window import Point


class MetricEvaluator:
    """Derives metric values per pod; stale values (older than ``stale_after``) are None.

    Values are memoized in the store until the pod's next scrape, so repeated HPA reads of a
    large job cost a dictionary lookup per pod.
    """

    def __init__(self, store: MetricStore, stale_after: float, clock: Callable[[], float]) -> None:
        self.store = store
        self.stale_after = stale_after
        self._clock = clock

    def now(self) -> float:
        """The clock staleness is judged by."""
        return self._clock()

    def pod_value(
        self,
        definition: MetricDefinition,
        pod: PodKey,
        metric_selector: LabelSelector,
        generation: int = 0,
    ) -> Point | None:
        """The pod's value of ``definition`` (None: no data, not enough data, or stale)."""
        key = (generation, definition.external, definition.name, str(metric_selector))
        point = self.store.memoized(
            pod, key, lambda: self._compute(definition, pod, metric_selector)
        )
        if not isinstance(point, Point):
            return None
        if self._clock() - point.timestamp > self.stale_after:
            return None
        return point

    def pod_values(
        self,
        definition: MetricDefinition,
        pods: Sequence[PodKey],
        metric_selector: LabelSelector,
        generation: int = 0,
    ) -> list[Point | None]:
        """``pod_value`` for many pods at once (one store lock hold)."""
        key = (generation, definition.external, definition.name, str(metric_selector))
        points = self.store.memoized_batch(
            pods, key, lambda pod: self._compute(definition, pod, metric_selector)
        )
        horizon = self._clock() - self.stale_after
        return [p if isinstance(p, Point) and p.timestamp >= horizon else None for p in points]

    def _compute(
        self, definition: MetricDefinition, pod: PodKey, metric_selector: LabelSelector
    ) -> Point | None:
        numerator = self._term(
            definition.numerator, definition.window_seconds, pod, metric_selector
        )
        if numerator is None or definition.denominator is None:
            return numerator
        denominator = self._term(
            definition.denominator, definition.window_seconds, pod, metric_selector
        )
        if denominator is None or denominator.value == 0:
            return None
        return Point(
            numerator.value / denominator.value, max(numerator.timestamp, denominator.timestamp)
        )

    def _term(
        self, term: SeriesTerm, window: float, pod: PodKey, metric_selector: LabelSelector
    ) -> Point | None:
        values: list[float] = []
        newest = float("-inf")
        for label_set, w in self.store.windows(pod, term.series):
            labels = dict(label_set)
            if any(labels.get(k) != v for k, v in term.labels.items()):
                continue
            if not metric_selector.empty and not metric_selector.matches(labels):
                continue
            point = w.rate(window) if term.counter else w.latest()
            if point is None:
                continue
            values.append(point.value)
            newest = max(newest, point.timestamp)
        if not values:
            return None
        return Point(term.reduce.apply(values), newest)
