"""`edl-adapter preflight` on the rendered base: which live APIServices it refuses to take over."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from metrics_adapter.errors import ConfigError
from metrics_adapter.preflight import check, conflicts, planned_apiservices
from tests.support.kustomize import render

EXTERNAL = "v1beta1.external.metrics.k8s.io"


def keda_owned() -> dict[str, Any]:
    return {
        "kind": "APIService",
        "metadata": {
            "name": EXTERNAL,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "keda"},
        },
        "spec": {"service": {"name": "keda-operator-metrics-apiserver", "namespace": "keda"}},
    }


def live_of(*objs: dict[str, Any]) -> Any:
    by_name = {o["metadata"]["name"]: o for o in objs}

    def read(name: str) -> Mapping[str, Any] | None:
        return by_name.get(name)

    return read


def base_text() -> str:
    return yaml.safe_dump_all(render("manifests/base"))


def test_an_apiservice_of_another_service_is_refused_with_its_owner() -> None:
    status, lines = check(base_text(), live_of(keda_owned()), take_over=False)
    assert status == 1
    assert lines[0] == (
        f"preflight: refused: APIService {EXTERNAL} is served by Service "
        "keda/keda-operator-metrics-apiserver (Helm release keda); installing would switch it "
        "to edl-system/edl-metrics-adapter"
    )
    assert "custom-only" in lines[-1] and len(lines) == 2


def test_take_over_turns_the_refusal_into_a_warning() -> None:
    status, lines = check(base_text(), live_of(keda_owned()), take_over=True)
    assert status == 0 and lines[0].startswith("preflight: warning: APIService ")


def test_nothing_live_or_our_own_service_passes() -> None:
    assert check(base_text(), live_of(), take_over=False)[0] == 0
    ours = [dict(d) for d in planned_apiservices(base_text())]
    assert conflicts(planned_apiservices(base_text()), live_of(*ours)) == []


def test_the_custom_only_overlay_does_not_touch_the_external_apiservice() -> None:
    text = yaml.safe_dump_all(render("manifests/overlays/custom-only"))
    assert check(text, live_of(keda_owned()), take_over=False)[0] == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [("a: [", "not YAML"), ("kind: ConfigMap\n", "no APIService")],
)
def test_bad_manifests_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check(text, live_of(), take_over=False)
