"""The Kubernetes backends without a cluster: the history ConfigMap's compare-and-swap.

The watches' list/watch protocol is tests/unit/metrics_adapter/test_kube_reflector.py's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from edl_sizing import SizeHistory
from metrics_adapter.errors import SourceError
from metrics_adapter.sizing.history_configmap import ConfigMapHistoryStore


class FakeCore:
    """read/create/replace of one ConfigMap with resourceVersion checks; `races` conflicts."""

    def __init__(self, races: int = 0) -> None:
        self.cm: Any = None
        self.version = 0
        self.races = races
        self.writes = 0

    def read_namespaced_config_map(self, name: str, ns: str, **_: Any) -> Any:
        if self.cm is None:
            raise ApiException(status=404)
        meta = SimpleNamespace(resource_version=str(self.version))
        return SimpleNamespace(data=dict(self.cm), metadata=meta)

    def create_namespaced_config_map(self, ns: str, body: dict[str, Any], **_: Any) -> None:
        if self.cm is not None:
            raise ApiException(status=409)
        self._store(body)

    def replace_namespaced_config_map(
        self, name: str, ns: str, body: dict[str, Any], **_: Any
    ) -> None:
        if self.races:
            self.races -= 1
            other = SizeHistory()
            other.load_json(self.cm["history"])
            other.observe("ns/other", 1, 50.0, 5.0)  # another replica's write lands first
            self.cm = {"history": other.to_json()}
            self.version += 1
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise ApiException(status=409)
        self._store(body)

    def _store(self, body: dict[str, Any]) -> None:
        self.cm = dict(body["data"])
        self.version += 1
        self.writes += 1


def store_with(core: FakeCore, attempts: int = 5) -> ConfigMapHistoryStore:
    store = ConfigMapHistoryStore(None, "edl-system", "edl-sizing-history", attempts=attempts)
    store._core = core
    return store


def observe(size: int, x: float):  # type: ignore[no-untyped-def]
    def change(h: SizeHistory) -> bool:
        h.observe("ns/job", size, x, 1.0)
        return True

    return change


def test_configmap_is_created_then_updated_with_compare_and_swap() -> None:
    core = FakeCore()
    store = store_with(core)
    assert store.load().jobs == {}
    store.update(observe(2, 100.0))
    core.races = 1
    after = store.update(observe(3, 140.0))
    # The racing replica's observation survived: the change was reapplied on its version.
    assert after.observed("ns/job") == {2: 100.0, 3: 140.0}
    assert after.observed("ns/other") == {1: 50.0}
    assert store.load().to_json() == after.to_json()


def test_no_write_when_nothing_changed_and_a_bounded_number_of_attempts() -> None:
    core = FakeCore()
    store = store_with(core, attempts=3)
    store.update(lambda h: False)
    assert core.writes == 0
    store.update(observe(2, 100.0))
    core.races = 10
    with pytest.raises(SourceError, match="3 writes in a row lost"):
        store.update(observe(3, 140.0))


def test_unreadable_stored_history_starts_afresh() -> None:
    core = FakeCore()
    core.cm = {"history": "{not json"}
    core.version = 1
    assert store_with(core).load().jobs == {}


def test_a_version_1_configmap_is_read_and_rewritten_as_version_2() -> None:
    """An adapter upgraded over an old history keeps it: its sizes, of unknown placement."""
    core = FakeCore()
    core.cm = {
        "history": '{"jobs":{"ns/job":{"pause":[0.5,2],"sizes":{"2":[100.0,3,1.0]},'
        '"updated":1.0}},"version":1}'
    }
    core.version = 1
    store = store_with(core)
    assert store.load().placed("ns/job") == {(2, 0): 100.0}

    def on_two_nodes(h: SizeHistory) -> bool:
        h.observe("ns/job", 4, 150.0, 2.0, nodes=2)
        return True

    after = store.update(on_two_nodes)
    assert after.placed("ns/job") == {(2, 0): 100.0, (4, 2): 150.0}
    assert '"version":2' in core.cm["history"] and '"4@2"' in core.cm["history"]
    assert store.load().pause("ns/job") == 0.5
