"""The sizer's options: parsing, validation, one-line errors, backends by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from edl_sizing import Resources
from metrics_adapter.assembly import AdapterRuntime
from metrics_adapter.cli import build_parser, main, settings_from_args
from metrics_adapter.errors import ConfigError
from metrics_adapter.options import default_settings
from metrics_adapter.settings import AdapterSettings
from metrics_adapter.sizing.backends import CAPACITY_SOURCES, HISTORY_STORES, BackendContext, build


def parse(*argv: str) -> AdapterSettings:
    return settings_from_args(build_parser().parse_args(["serve", *argv]))


def test_sizing_options_parse() -> None:
    s = parse(
        "--sizing", "--sizing-interval", "2s", "--sizing-headroom", "cpu=250m, memory=512Mi",
        "--sizing-hold-off", "1m30s", "--sizing-payback", "10m", "--sizing-exploration", "1.5",
        "--sizing-history", "memory", "--sizing-default-max-workers", "4",
    )  # fmt: skip
    assert s.sizing and s.sizing_interval == 2.0 and s.sizing_hold_off == 90.0
    assert s.sizing_headroom == Resources(cpu=0.25, memory=512 * 2**20)
    assert (s.sizing_payback, s.sizing_exploration, s.sizing_history) == (600.0, 1.5, "memory")
    assert s.sizing_default_max_workers == 4
    defaults = parse()
    assert not defaults.sizing and defaults.sizing_headroom == Resources()


def test_env_variables_set_sizing_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDL_ADAPTER_SIZING", "true")
    monkeypatch.setenv("EDL_ADAPTER_SIZING_INTERVAL", "3s")
    s = parse()
    assert s.sizing and s.sizing_interval == 3.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizing-headroom", "cpu"], "--sizing-headroom='cpu': expected <resource>=<quantity>"),
        (["--sizing-headroom", "disk=1Gi"], "'disk=1Gi': expected <resource>=<quantity>"),
        (["--sizing-headroom", "cpu=lots"], "--sizing-headroom='cpu=lots': cpu"),
        (["--sizing-exploration", "0.5"], "--sizing-exploration='0.5': must be >= 1"),
        (["--sizing-default-max-workers", "0"], "must be >= 1"),
        (["--sizing-hold-off", "soon"], "invalid duration"),
        (["--sizing", "--sizing-capacity", "static"], "needs --sizing-capacity-file"),
        (
            ["--sizing", "--sizing-capacity", "static", "--sizing-capacity-file", "/nope.yaml"],
            "cannot read capacity file /nope.yaml",
        ),
        (
            ["--sizing", "--kubeconfig", "/nope/kubeconfig"],
            "--sizing with kubernetes needs a cluster",
        ),
    ],
)
def test_bad_sizing_options_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")
    base = ["serve", "--no-tls", "--static-file", str(pods), "--authentication", "none",
            "--authorization", "none", "--sizing-history", "memory"]  # fmt: skip
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("edl-adapter: error:"), err


def test_unknown_backend_names_say_which_exist() -> None:
    ctx = BackendContext(default_settings(), lambda: None, lambda _: None)
    with pytest.raises(
        ConfigError, match=r"unknown capacity source 'mesos' \(one of kubernetes, static\)"
    ):
        build(CAPACITY_SOURCES, "mesos", "capacity source", ctx)
    assert sorted(HISTORY_STORES) == ["configmap", "memory"]


def static_sizing_runtime(tmp_path: Path) -> AdapterRuntime:
    """The assembled adapter, sizing one job (Deployment default/digits) on a static capacity,
    after its first round."""
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes: [{name: local, allocatable: {cpu: '4'}}]\n"
        "jobs: [{namespace: default, name: digits, replicas: 1, worker: {cpu: '1'},"
        " maxReplicas: 4}]\n"
    )
    settings = parse(
        "--static-file", str(pods), "--authentication", "none", "--authorization", "none",
        "--sizing", "--sizing-capacity", "static", "--sizing-capacity-file", str(cluster),
        "--sizing-history", "memory",
    )  # fmt: skip
    runtime = AdapterRuntime(settings)
    assert runtime.sizer is not None
    runtime.sizer.run_once()
    return runtime


def test_runtime_with_a_static_capacity_serves_desired_replicas(tmp_path: Path) -> None:
    runtime = static_sizing_runtime(tmp_path)
    client = runtime.app.test_client()
    path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/desired_replicas"
    (item,) = client.get(f"{path}?labelSelector=edl.paddlepaddle.org%2Fjob%3Ddigits").get_json()[
        "items"
    ]
    assert item["value"] == "2"
    text = client.get("/metrics").get_data(as_text=True)
    assert "edl_adapter_sizing_desired_replicas" in text
    assert client.get("/debug/sizing").get_json()["plan"]["jobs"][0]["desired"] == 2
    assert isinstance(runtime.metrics.registry, CollectorRegistry)


def test_runtime_serves_desired_replicas_as_the_object_metric_of_the_jobs_deployment(
    tmp_path: Path,
) -> None:
    """What an HPA with an Object metric on its Deployment reads (hpa-sizing-object.yaml), for
    clusters whose external.metrics.k8s.io belongs to KEDA: the same value as the External one."""
    client = static_sizing_runtime(tmp_path).app.test_client()
    group = "/apis/custom.metrics.k8s.io/v1beta2"
    resources = client.get(group).get_json()["resources"]
    assert "deployments.apps/desired_replicas" in [r["name"] for r in resources]
    answer = client.get(f"{group}/namespaces/default/deployments.apps/digits/desired_replicas")
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["kind"], body["apiVersion"]) == (
        "MetricValueList",
        "custom.metrics.k8s.io/v1beta2",
    )
    (item,) = body["items"]
    assert item["describedObject"] == {
        "kind": "Deployment",
        "namespace": "default",
        "name": "digits",
        "apiVersion": "apps/v1",
    }
    assert item["metric"] == {"name": "desired_replicas", "selector": None}
    assert item["value"] == "2"
    assert item["windowSeconds"] == round(default_settings().sizing_interval)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["timestamp"])
    other = client.get(f"{group}/namespaces/default/deployments.apps/other/desired_replicas")
    assert other.status_code == 404 and other.get_json()["kind"] == "Status"
