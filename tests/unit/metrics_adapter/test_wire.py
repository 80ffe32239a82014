"""Wire rendering: cached and streamed lists equal plain json.dumps; large lists stream."""

from __future__ import annotations

import json

from metrics_adapter.api.wire_shapes import MetricListRenderer, metric_value_list, status
from metrics_adapter.providers.protocol import MetricPoint
from metrics_adapter.scraping.catalogue import MetricCatalogue
from metrics_adapter.scraping.pod_registry import DescribedObject
from tests.unit.metrics_adapter.helpers import (
    T0,
    trainers_at_ten_samples,
)

SPS = MetricCatalogue.default().custom["samples_per_second"]


def points(n: int) -> list[MetricPoint]:
    return [
        MetricPoint(DescribedObject("Pod", "v1", f"p-{i}", "ml"), SPS, i * 1.5, T0 + i)
        for i in range(n)
    ]


def test_renderer_matches_json_dumps_for_both_versions() -> None:
    renderer = MetricListRenderer()
    for n in (0, 1, 7, 1200):
        kept = points(n)  # rendered again below: from the text kept on each point
        for version in ("v1beta1", "v1beta2", "v1beta1"):
            expected = json.dumps(metric_value_list(version, points(n)), separators=(",", ":"))
            assert renderer.render(version, kept) == expected.encode()
            streamed = b"".join(renderer.render_chunks(version, kept, chunk_items=5))
            assert streamed == expected.encode()


def test_each_point_keeps_its_text_per_version() -> None:
    (point,) = points(1)
    MetricListRenderer().render("v1beta2", [point])
    assert point.rendered is not None and set(point.rendered) == {"v1beta2"}
    MetricListRenderer().render("v1beta1", [point])
    assert set(point.rendered) == {"v1beta1", "v1beta2"}
    assert json.loads(point.rendered["v1beta1"])["metricName"] == "samples_per_second"


def test_status_shape() -> None:
    assert status(404, "NotFound", "x") == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "x",
        "reason": "NotFound",
        "code": 404,
    }


def test_large_pod_lists_stream_valid_json() -> None:
    h = trainers_at_ten_samples(2500)
    resp = h.app.test_client().get(
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/samples_per_second"
    )
    assert resp.status_code == 200
    assert resp.is_streamed
    items = json.loads(resp.get_data())["items"]
    assert len(items) == 2500
    assert {i["value"] for i in items} == {"10"}


def test_a_kept_list_is_rendered_once_and_a_new_list_afresh() -> None:
    renderer = MetricListRenderer(max_bodies=2)
    kept = points(3)
    body = renderer.render("v1beta2", kept)
    assert renderer.render("v1beta2", kept) is body  # the same list: the kept body
    assert renderer.render("v1beta1", kept) != body  # another version: its own body
    other = points(3)
    other[0].value = 99.0  # an equal-looking but different list renders from its points
    assert json.loads(renderer.render("v1beta2", other))["items"][0]["value"] == "99"
    for _ in range(3):  # bounded: more lists than max_bodies empty the cache
        renderer.render("v1beta2", points(1))
    assert renderer.render("v1beta2", kept) == body
