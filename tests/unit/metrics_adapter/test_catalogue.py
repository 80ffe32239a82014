"""Metric catalogue: built-in defaults, YAML format errors, hot reload without dropping requests."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml

from metrics_adapter.assembly import AdapterRuntime
from metrics_adapter.errors import ConfigError
from metrics_adapter.options import default_settings
from metrics_adapter.scraping.catalogue import Aggregation, MetricCatalogue, MetricKind
from metrics_adapter.settings import AuthMode


def test_defaults_serve_the_contract_names() -> None:
    c = MetricCatalogue.default()
    assert set(c.custom) == {
        "samples_per_second",
        "steps_per_second",
        "step_seconds",
        "comm_time_ratio",
        "gpu_utilization",
    }
    assert set(c.external) >= {"busy_accelerators", "busy_cpus", "job_samples_per_second"}
    assert c.custom["samples_per_second"].aggregation is Aggregation.SUM
    assert c.custom["step_seconds"].kind is MetricKind.RATIO
    assert c.custom["gpu_utilization"].numerator.reduce is Aggregation.MEAN
    assert "edl_trainer_step_duration_seconds_count" in c.needed_series


BAD = [
    ("metrics: [", "invalid YAML"),
    ("[]", "expected a mapping"),
    ("metrics: []\nbogus: 1", "unknown top-level"),
    ("metrics: []", "defines no metric"),
    ("metrics: [{name: 'bad name', series: x}]", "invalid metric name"),
    ("metrics: [{name: m, series: 'bad-series'}]", "invalid series name"),
    ("metrics: [{name: m, series: x, kind: histogram}]", "histogram"),
    ("metrics: [{name: m, series: x, aggregation: median}]", "median"),
    ("metrics: [{name: m, kind: ratio, numerator: {series: a}}]", "denominator"),
    ("metrics: [{name: m, series: x}, {name: m, series: y}]", "duplicate"),
    ("metrics: [{name: m, series: x, window: soon}]", "invalid duration"),
    ("metrics: [{name: m, series: x, colour: red}]", "unknown keys"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_catalogues_are_rejected_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MetricCatalogue.from_yaml(text, source="test.yaml")


def test_custom_catalogue_with_labels_and_window() -> None:
    c = MetricCatalogue.from_yaml(
        "window: 1m\nmetrics:\n"
        "  - {name: detect_seconds, kind: counter, series: edl_trainer_rescale_phase_seconds_total,"
        " labels: {phase: detect}, window: 2m}\n"
        "  - {name: world, series: edl_trainer_world_size, aggregation: max}\n"
    )
    d = c.custom["detect_seconds"]
    assert d.window_seconds == 120
    assert d.numerator.labels == {"phase": "detect"}
    assert c.custom["world"].window_seconds == 60
    assert c.max_window_seconds == 120


def test_hot_reload_swaps_atomically_and_keeps_serving(tmp_path: Path) -> None:
    config = tmp_path / "catalogue.yaml"
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: [{namespace: ml, name: t-0, labels: {app: trainer}}]\n")
    doc = yaml.safe_load(
        (
            Path(__file__).parents[3] / "metrics_adapter" / "scraping" / "catalogue.default.yaml"
        ).read_text()
    )
    config.write_text(yaml.safe_dump(doc))
    settings = default_settings(
        static_file=pods,
        metrics_config=config,
        authentication=AuthMode.NONE,
        authorization=AuthMode.NONE,
    )
    runtime = AdapterRuntime(settings)
    client = runtime.app.test_client()
    reloader = next(c for c in runtime.components if type(c).__name__ == "CatalogueReloader")
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/"
    codes: list[int] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            codes.append(client.get(path + "samples_per_second").status_code)

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        doc["metrics"].append({"name": "world_size", "series": "edl_trainer_world_size"})
        config.write_text(yaml.safe_dump(doc))
        assert reloader.check()  # type: ignore[attr-defined]
        assert client.get(path + "world_size").status_code == 200
        config.write_text("metrics: [")  # broken: keep the previous one
        assert not reloader.check()  # type: ignore[attr-defined]
        assert client.get(path + "world_size").status_code == 200
        assert runtime.catalogue.current.generation == 1
    finally:
        stop.set()
        thread.join(5)
    assert codes and set(codes) == {200}
