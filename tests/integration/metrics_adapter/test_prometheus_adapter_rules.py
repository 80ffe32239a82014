"""manifests/overlays/prometheus-adapter/rules.yaml against a real Prometheus.

Two agent-like endpoints (100 and 50 samples/s, 0.1 s steps, 25 % communication, GPUs 75 % and
25 % busy, half a CPU each) are scraped by a real Prometheus with the labels a pod relabelling
gives (`namespace`, `pod`, `app`; `deployment` for the Object metrics). Each rule is used as
prometheus-adapter uses it: its `seriesQuery` must find the agents' series with the labels its
`resources.overrides` name, its `name` must turn the series into EDL's metric name, and its
`metricsQuery`, with `<<.Series>>`, `<<.LabelMatchers>>` and `<<.GroupBy>>` filled in as
prometheus-adapter fills them for `pods/*/<metric>?labelSelector=app=trainer` (or an External
metric with that selector), must give the values EDL's own adapter serves for the same agents
(tests/integration/metrics_adapter/test_adapter_prometheus.py asserts those). The real
prometheus-adapter
binary is not run here; bench/bench_adapter_peer.py runs it (built from the Go module proxy)
with these rules.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.adapter_processes import (
    spawn,
    start_agent,
)
from tests.support.net import free_port
from tests.support.waiting import wait_for

PROMETHEUS = shutil.which("prometheus")
RULES = Path(__file__).resolve().parents[3] / "manifests/overlays/prometheus-adapter/rules.yaml"
PODS = {"trainer-0": 100.0, "trainer-1": 50.0}
_TEMPLATE = re.compile(r"<<\s*\.(\w+)\s*>>")

# What EDL's adapter serves for these agents (its catalogue semantics), per pod and external;
# rates within 25 %: the agents tick from a Python loop on a loaded machine.
EXPECTED_PODS = {
    "samples_per_second": PODS,
    "steps_per_second": dict.fromkeys(PODS, 10.0),
    "step_seconds": dict.fromkeys(PODS, 0.1),
    "comm_time_ratio": dict.fromkeys(PODS, 0.25),
    "gpu_utilization": dict.fromkeys(PODS, 0.5),
}
# Object metrics on deployments.apps/trainer (rules whose overrides name `deployment`), as
# EDL's catalogue aggregates them over the Deployment's pods.
EXPECTED_OBJECT = {"samples_per_second": 150.0, "gpu_utilization": 0.5}
EXPECTED_EXTERNAL = {"job_samples_per_second": 150.0, "busy_accelerators": 2.0, "busy_cpus": 1.0}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if PROMETHEUS is None:
        pytest.skip("the prometheus binary is absent (bash scripts/install-system-deps.sh)")
    workdir = tmp_path_factory.mktemp("prometheus-adapter-rules")
    with contextlib.ExitStack() as stack:
        targets = []
        for name, rate in PODS.items():
            proc, port = start_agent(workdir, name, rate)
            stack.callback(proc.stop)
            labels = {"namespace": "ml", "pod": name, "app": "trainer", "deployment": "trainer"}
            targets.append({"targets": [f"127.0.0.1:{port}"], "labels": labels})
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [{"job_name": "edl-agents", "static_configs": targets}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        prom = spawn(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            workdir,
        )
        stack.callback(prom.stop)
        url = f"http://127.0.0.1:{port}"
        wait_for(
            lambda: requests.get(f"{url}/-/ready", timeout=1).ok,
            timeout_s=60,
            what="prometheus ready",
            interval_s=0.2,
        )
        # a full 30 s rate window of samples from both agents
        wait_for(
            lambda: len(_query(url, "count_over_time(edl_trainer_steps_total[30s]) >= 25")) == 2,
            timeout_s=90,
            what="30 s of samples",
            interval_s=1.0,
        )
        yield url


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    r = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    r.raise_for_status()
    return list(r.json()["data"]["result"])


def _render(template: str, fields: dict[str, str]) -> str:
    """prometheus-adapter's `<<.Field>>` templating, for the fields its docs define."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in fields:
            raise AssertionError(f"template field .{m.group(1)} is not one prometheus-adapter has")
        return fields[m.group(1)]

    return _TEMPLATE.sub(sub, template)


def _metric_name(rule: dict[str, Any], series: str) -> str:
    pattern, replacement = rule["name"]["matches"], rule["name"].get("as", "")
    m = re.search(pattern, series)
    assert m, f"{series} does not match {pattern}"
    return m.expand(replacement.replace("${1}", r"\1")) if replacement else m.group(0)


def _discovered(url: str, rule: dict[str, Any]) -> str:
    """The series name the rule's seriesQuery finds, with every override label present."""
    r = requests.get(f"{url}/api/v1/series", params={"match[]": rule["seriesQuery"]}, timeout=5)
    r.raise_for_status()
    found = r.json()["data"]
    assert found, f"seriesQuery {rule['seriesQuery']} finds nothing"
    for labels in found:
        assert set(rule["resources"]["overrides"]) <= set(labels), labels
    (name,) = {s["__name__"] for s in found}
    return str(name)


def _rules() -> dict[str, Any]:
    return dict(yaml.safe_load(RULES.read_text()))


def test_every_catalogue_metric_has_a_rule() -> None:
    config = _rules()
    assert set(config) == {"rules", "externalRules"}
    names = {rule["name"]["as"] for rule in config["rules"]}
    assert names == set(EXPECTED_PODS)
    assert {rule["name"]["as"] for rule in config["externalRules"]} == set(EXPECTED_EXTERNAL)


def test_pods_rules_give_edls_values(prometheus: str) -> None:
    for rule in _rules()["rules"]:
        series = _discovered(prometheus, rule)
        metric = _metric_name(rule, series)
        query = _render(
            rule["metricsQuery"],
            {
                "Series": series,
                "LabelMatchers": 'namespace="ml",pod=~"trainer-0|trainer-1",app="trainer"',
                "GroupBy": "pod",
            },
        )
        result = {r["metric"]["pod"]: float(r["value"][1]) for r in _query(prometheus, query)}
        expected = EXPECTED_PODS[metric]
        assert result == {p: pytest.approx(v, rel=0.25) for p, v in expected.items()}, (
            metric,
            query,
        )


def test_external_rules_give_edls_values(prometheus: str) -> None:
    for rule in _rules()["externalRules"]:
        series = _discovered(prometheus, rule)
        metric = _metric_name(rule, series)
        query = _render(
            rule["metricsQuery"],
            {"Series": series, "LabelMatchers": 'namespace="ml",app="trainer"', "GroupBy": ""},
        )
        (result,) = _query(prometheus, query)
        assert float(result["value"][1]) == pytest.approx(EXPECTED_EXTERNAL[metric], rel=0.25), (
            metric,
            query,
        )


def test_object_rules_give_edls_deployment_values(prometheus: str) -> None:
    served = {}
    for rule in _rules()["rules"]:
        if "deployment" not in rule["resources"]["overrides"]:
            continue
        series = _discovered(prometheus, rule)
        metric = _metric_name(rule, series)
        query = _render(
            rule["metricsQuery"],
            {
                "Series": series,
                "LabelMatchers": 'namespace="ml",deployment="trainer"',
                "GroupBy": "deployment",
            },
        )
        (result,) = _query(prometheus, query)
        assert result["metric"] == {"deployment": "trainer"}, query
        served[metric] = float(result["value"][1])
    assert served == {m: pytest.approx(v, rel=0.25) for m, v in EXPECTED_OBJECT.items()}
