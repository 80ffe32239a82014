from __future__ import annotations

from pathlib import Path

import pytest

from metrics_adapter.errors import ConfigError
from metrics_adapter.scraping.pod_registry import PodKey, PodRegistry
from metrics_adapter.scraping.sources.static import StaticPodDiscovery, load_static_pods
from metrics_adapter.scraping.store import MetricStore, Sample
from tests.unit.metrics_adapter.helpers import ManualClock


def test_static_pods_file(tmp_path: Path) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text(
        "pods:\n"
        "  - {namespace: ml, name: t-0, labels: {app: trainer}, deployment: trainer,\n"
        "     replicaset: trainer-1, node: n1, address: '127.0.0.1:9400'}\n"
        "  - {namespace: ml, name: t-1, url: 'http://10.0.0.1:1234/m'}\n"
    )
    a, b = load_static_pods(f)
    assert a.scrape_url == "http://127.0.0.1:9400/metrics"
    assert [o.resource for o in a.owners] == ["replicasets.apps", "deployments.apps"]
    assert a.owned_by("deployments.apps", "trainer")
    assert a.node == "n1"
    assert b.scrape_url == "http://10.0.0.1:1234/m"
    assert b.labels == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pods: 3", "'pods' list"),
        ("- a", "'pods' list"),
        ("pods: [{name: 'A_b'}]", "invalid namespace/name"),
        ("pods: [{name: a, labels: {'-x': y}}]", "invalid label"),
        ("pods: [{name: a, port: 3}]", "unknown keys"),
        ("pods: [", "cannot load"),
    ],
)
def test_bad_static_files(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_static_pods(f)


def test_reload_drops_removed_pods_from_the_store(tmp_path: Path) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text("pods: [{namespace: ml, name: a}, {namespace: ml, name: b}]\n")
    pods, store = PodRegistry(), MetricStore(4, 60, ManualClock())
    source = StaticPodDiscovery(f, pods, store)
    source.load()
    store.ingest(PodKey("ml", "b"), [Sample("x", {}, 1.0)])
    f.write_text("pods: [{namespace: ml, name: a}]\n")
    source._reload_if_changed()
    assert [p.name for p in pods.all()] == ["a"]
    assert store.pods() == []
    f.write_text("pods: [")  # broken file: keep what we have
    source._reload_if_changed()
    assert [p.name for p in pods.all()] == ["a"]
