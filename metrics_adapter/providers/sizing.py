"""The provider serving the sizer's plan (:mod:`metrics_adapter.sizing.sizer` decides it).

:class:`SizingProvider` serves the External metric ``desired_replicas``: one item per job,
labelled ``edl.paddlepaddle.org/job: <name>``, value the replicas the plan wants. A job
name carried by two Deployments of a namespace is ambiguous: it is served no item. The same
value is the custom (Object) metric ``desired_replicas`` of the job's Deployment
(``deployments.apps``), for clusters whose ``external.metrics.k8s.io`` another adapter
(KEDA, Datadog) owns; addressed by the Deployment's name, it is never ambiguous. A plan
older than ``max_age`` is not served (the HPA then keeps its scale).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metrics_adapter.errors import NotFoundError
from metrics_adapter.kube.selectors import LabelSelector, Operator
from metrics_adapter.providers.protocol import (
    CustomMetricInfo,
    ExternalMetricInfo,
    ExternalPoint,
    MetricPoint,
)
from metrics_adapter.scraping.catalogue import Aggregation, MetricDefinition, MetricKind, SeriesTerm
from metrics_adapter.scraping.pod_registry import DescribedObject
from metrics_adapter.sizing.kube_objects import JOB_LABEL
from metrics_adapter.sizing.sizer import PublishedPlan, Sizer

DESIRED_REPLICAS = "desired_replicas"
DEPLOYMENTS = "deployments.apps"
OBJECT_METRIC = CustomMetricInfo(DEPLOYMENTS, True, DESIRED_REPLICAS)


class SizingProvider:
    """Serves ``desired_replicas`` from the sizer's latest plan.

    As an External metric, and as the Object metric of each job's Deployment.
    """

    def __init__(self, sizer: Sizer, clock: Callable[[], float], max_age_s: float) -> None:
        self._sizer = sizer
        self._clock = clock
        self._max_age = max_age_s
        self._definition = MetricDefinition(
            DESIRED_REPLICAS,
            MetricKind.GAUGE,
            SeriesTerm(DESIRED_REPLICAS, counter=False),
            None,
            Aggregation.MAX,
            sizer.interval,
            description="the replicas EDL's sizer wants for the job of this Deployment",
        )

    def _points(self, namespace: str | None, info: CustomMetricInfo) -> dict[str, MetricPoint]:
        """Deployment name -> its point, for the jobs of `namespace` in the fresh plan."""
        if info.metric != DESIRED_REPLICAS or info.group_resource != DEPLOYMENTS:
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for {info.group_resource}"
            )
        published = self.fresh_plan()
        points: dict[str, MetricPoint] = {}
        if published is None:
            return points
        for key in published.in_namespace(namespace):
            d = published.plan.jobs[key]
            job_namespace, _, deployment = key.partition("/")
            described = DescribedObject("Deployment", "apps/v1", deployment, job_namespace)
            points[deployment] = MetricPoint(
                described, self._definition, float(d.desired), published.decided_at
            )
        return points

    def get_metric_by_name(
        self,
        namespace: str | None,
        name: str,
        info: CustomMetricInfo,
        selector: LabelSelector,
        metric_selector: LabelSelector,
    ) -> MetricPoint:
        """The sizer's decision for the job of Deployment `name`.

        Raises:
            NotFoundError: not a job's Deployment, or no fresh plan.
        """
        point = self._points(namespace, info).get(name)
        if point is None:
            raise NotFoundError(
                f"the server could not find the metric {info.metric} for "
                f"{info.group_resource} {name} (not a sized job, or no fresh sizing plan)"
            )
        return point

    def get_metric_by_selector(
        self,
        namespace: str | None,
        selector: LabelSelector,
        info: CustomMetricInfo,
        metric_selector: LabelSelector,
    ) -> list[MetricPoint]:
        """Every job Deployment's decision in `namespace`.

        A label selector would need the Deployments' labels, which the plan does not keep:
        only the empty selector matches.
        """
        if selector.requirements:
            return []
        return list(self._points(namespace, info).values())

    def list_all_metrics(self) -> list[CustomMetricInfo]:
        """``desired_replicas`` on ``deployments.apps``."""
        return [OBJECT_METRIC]

    def get_external_metric(
        self, namespace: str, metric_selector: LabelSelector, info: ExternalMetricInfo
    ) -> list[ExternalPoint]:
        """One item per job of ``namespace`` whose job label the selector matches."""
        if info.metric != DESIRED_REPLICAS:
            raise NotFoundError(f"the server could not find the external metric {info.metric}")
        published = self.fresh_plan()
        if published is None:
            return []
        items = []
        wanted = _job_names(metric_selector)
        keys = (
            published.in_namespace(namespace)
            if wanted is None
            else published.named(namespace, wanted)
        )
        for key in keys:
            d = published.plan.jobs[key]
            name = published.name(key)
            labels = {JOB_LABEL: name}
            if not metric_selector.matches(labels):
                continue
            if (namespace, name) in published.ambiguous:
                continue
            items.append(
                ExternalPoint(
                    DESIRED_REPLICAS,
                    labels,
                    float(d.desired),
                    published.decided_at,
                    self._sizer.interval,
                )
            )
        return items

    def list_all_external_metrics(self) -> list[ExternalMetricInfo]:
        """``desired_replicas``."""
        return [ExternalMetricInfo(DESIRED_REPLICAS)]

    def fresh_plan(self) -> PublishedPlan | None:
        """The latest plan, unless it is older than ``max_age``."""
        published = self._sizer.plan
        if published is None or self._clock() - published.decided_at > self._max_age:
            return None
        return published

    def debug_page(self) -> dict[str, Any]:
        """``/debug/sizing``: the current plan, with job names (read-only)."""
        published = self._sizer.plan
        if published is None:
            return {"plan": None, "reason": "no cluster view yet"}
        doc = published.plan.to_dict()
        for job in doc["jobs"]:
            job["name"] = published.name(job["job"])
            job["served"] = (job["job"].partition("/")[0], job["name"]) not in published.ambiguous
        stale = self._clock() - published.decided_at > self._max_age
        return {"plan": doc, "decidedAt": published.decided_at, "stale": stale}


def _job_names(selector: LabelSelector) -> tuple[str, ...] | None:
    """The job names a selector can match at most (``job=a``, ``job in (a,b)``); None: any."""
    for r in selector.requirements:
        if r.key == JOB_LABEL and r.operator in (Operator.EQUALS, Operator.IN):
            return r.values
    return None
