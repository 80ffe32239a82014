"""Property tests of the URL router and the whole request edge: never a 500, always a Status."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote, unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder

from metrics_adapter.api.routes import parse_path
from metrics_adapter.errors import AdapterError
from tests.unit.metrics_adapter.helpers import standard

_segment = st.one_of(
    st.sampled_from(
        [
            "apis",
            "custom.metrics.k8s.io",
            "external.metrics.k8s.io",
            "v1beta1",
            "v1beta2",
            "namespaces",
            "ml",
            "pods",
            "*",
            "%2A",
            "%2F",
            "%ff",
            "%",
            "metrics",
            "deployments.apps",
            "trainer",
            "samples_per_second",
            "",
            "..",
            "nodes",
            "openapi",
            "v2",
            "healthz",
        ]
    ),
    st.text(max_size=12).map(lambda s: quote(s, safe="")),
    st.text(alphabet=st.sampled_from(list("az09-_.%*~:@!$&'()+,;=")), max_size=10),
)
_path = st.lists(_segment, max_size=8).map(lambda segs: "/" + "/".join(segs))


@pytest.mark.slow
@settings(max_examples=1000)
@given(_path)
def test_router_raises_only_adapter_errors(path: str) -> None:
    try:
        route = parse_path(path)
    except AdapterError as e:
        assert e.code in (400, 404)
    else:
        assert route.path.startswith("/")


HARNESS = standard()


@settings(max_examples=400)
@given(
    _path,
    st.sampled_from(
        [
            "",
            "labelSelector=",
            "labelSelector=app%3Dtrainer",
            "labelSelector=%28",
            "metricLabelSelector=gpu+in+%28",
            "labelSelector=%ff%fe",
        ]
    ),
    st.sampled_from(["GET", "HEAD", "POST", "DELETE"]),
)
def test_app_never_answers_500(path: str, query: str, method: str) -> None:
    # Build the environ the way the server does (RAW_URI verbatim), not through a URL parser.
    environ = EnvironBuilder(path="/", method=method).get_environ()
    raw = path + ("?" + query if query else "")
    environ.update(
        RAW_URI=raw,
        REQUEST_URI=raw,
        QUERY_STRING=query,
        PATH_INFO=unquote(path, encoding="latin-1"),
    )
    status: list[str] = []

    def start_response(
        s: str, h: list[tuple[str, str]], e: object = None
    ) -> Callable[[bytes], object]:
        status.append(s)
        return lambda _: None

    body = b"".join(HARNESS.app(environ, start_response))
    code = int(status[0].split()[0])
    assert code in (200, 400, 404, 405, 503), (raw, body)
    if code >= 400 and method != "HEAD" and body.startswith(b"{"):
        doc = json.loads(body)
        assert doc["kind"] == "Status"
        assert doc["code"] == code
