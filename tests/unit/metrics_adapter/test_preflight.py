"""`edl-adapter preflight` on the rendered base: which live APIServices it refuses to take over."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

import metrics_adapter.cli
from metrics_adapter import preflight
from metrics_adapter.errors import ConfigError
from metrics_adapter.preflight import Refused, check, conflicts, planned_apiservices
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


@pytest.mark.slow
def test_an_apiservice_of_another_service_is_refused_with_its_owner() -> None:
    with pytest.raises(Refused) as refused:
        check(base_text(), live_of(keda_owned()), take_over=False)
    assert str(refused.value) == (
        f"APIService {EXTERNAL} is served by Service keda/keda-operator-metrics-apiserver "
        "(Helm release keda); installing would switch it to edl-system/edl-metrics-adapter; "
        "leave that APIService out (manifests/overlays/custom-only for the external one) or "
        "pass --take-over"
    )


@pytest.mark.slow
def test_take_over_turns_the_refusal_into_a_warning() -> None:
    result, warnings = check(base_text(), live_of(keda_owned()), take_over=True)
    assert result == f"preflight: ok: taking over {EXTERNAL} (--take-over)"
    assert [w.startswith(f"APIService {EXTERNAL} is served by") for w in warnings] == [True]


@pytest.mark.slow
def test_nothing_live_or_our_own_service_passes() -> None:
    result, warnings = check(base_text(), live_of(), take_over=False)
    assert result.startswith("preflight: ok: no other Service serves ") and warnings == []
    ours = [dict(d) for d in planned_apiservices(base_text())]
    assert conflicts(planned_apiservices(base_text()), live_of(*ours)) == []


@pytest.mark.slow
def test_the_custom_only_overlay_does_not_touch_the_external_apiservice() -> None:
    text = yaml.safe_dump_all(render("manifests/overlays/custom-only"))
    assert check(text, live_of(keda_owned()), take_over=False)[1] == []


@pytest.mark.parametrize(
    ("text", "message"),
    [("a: [", "not YAML"), ("kind: ConfigMap\n", "no APIService")],
)
def test_bad_manifests_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check(text, live_of(), take_over=False)


@pytest.fixture
def cli_against_keda(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[..., tuple[int, str, str]]:
    """`edl-adapter preflight -f <the rendered base>` against a cluster where KEDA serves the
    external APIService: (status, stdout, stderr)."""
    manifests = tmp_path / "base.yaml"
    manifests.write_text(base_text())
    monkeypatch.setattr(metrics_adapter.cli, "make_api_client", lambda kubeconfig: None)
    monkeypatch.setattr(preflight, "live_apiservices", lambda client: live_of(keda_owned()))
    monkeypatch.delenv("EDL_LOG_FORMAT", raising=False)

    def run(*flags: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = metrics_adapter.cli.main(["preflight", "-f", str(manifests), *flags])
        return status, out.getvalue(), err.getvalue()

    return run


@pytest.mark.slow
def test_the_cli_refuses_in_one_error_line_like_every_edl_command(
    cli_against_keda: Callable[..., tuple[int, str, str]],
) -> None:
    status, out, err = cli_against_keda()
    assert (status, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith(
        f"edl-adapter: error: APIService {EXTERNAL} is served by Service "
        "keda/keda-operator-metrics-apiserver (Helm release keda)"
    )
    assert line.endswith("or pass --take-over")
    status, out, err = cli_against_keda("--log-format", "json")
    assert (status, out) == (1, "")
    (record,) = [json.loads(line) for line in err.splitlines()]
    assert (record["level"], record["logger"]) == ("error", "edl-adapter")
    assert record["message"] == line.removeprefix("edl-adapter: error: ")


@pytest.mark.slow
def test_the_cli_taking_over_warns_in_the_chosen_log_format(
    cli_against_keda: Callable[..., tuple[int, str, str]],
) -> None:
    status, out, err = cli_against_keda("--take-over")
    assert (status, out) == (0, f"preflight: ok: taking over {EXTERNAL} (--take-over)\n")
    assert err.startswith(f"edl-adapter: warning: APIService {EXTERNAL} is served by Service ")
    status, json_out, err = cli_against_keda("--take-over", "--log-format", "json")
    assert (status, json_out) == (0, out)  # the result is not a log line
    (record,) = [json.loads(line) for line in err.splitlines()]
    assert (record["level"], record["logger"]) == ("warning", "edl-adapter")
    assert record["message"].endswith("(--take-over)")
