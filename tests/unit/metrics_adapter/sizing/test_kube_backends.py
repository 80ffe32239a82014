"""The Kubernetes backends without a cluster: the reflector's list/watch, the ConfigMap CAS."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from edl_sizing import SizeHistory
from metrics_adapter.errors import SourceError
from metrics_adapter.sizing.cluster_watch import Reflector
from metrics_adapter.sizing.history_configmap import ConfigMapHistoryStore


class Response:
    def __init__(self, body: bytes, chunks: list[bytes] | None = None) -> None:
        self.data = body
        self._chunks = chunks or []

    def stream(self, amt: Any = None, decode_content: bool = False) -> list[bytes]:
        return self._chunks

    def release_conn(self) -> None:
        pass


def node(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "", "resourceVersion": rv}, "cpu": name}


def test_relist_reads_every_page_then_the_watch_applies_events() -> None:
    pages = {
        None: {"items": [node("a", "1")], "metadata": {"continue": "p2", "resourceVersion": "9"}},
        "p2": {"items": [node("b", "2"), node("skip", "3")], "metadata": {"resourceVersion": "9"}},
    }
    events = [
        {"type": "ADDED", "object": node("c", "10")},
        {"type": "DELETED", "object": node("a", "11")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
    ]
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    calls: list[dict[str, Any]] = []

    def list_fn(**kw: Any) -> Response:
        calls.append(kw)
        if kw.get("watch"):
            # one event split across chunks, as a chunked HTTP stream delivers it
            return Response(b"", [lines[:7], lines[7:40], lines[40:]])
        return Response(json.dumps(pages[kw.get("_continue")]).encode())

    r: Reflector[str] = Reflector(
        "nodes", list_fn, lambda o: None if o["metadata"]["name"] == "skip" else o["cpu"]
    )
    assert r.relist() == "9" and sorted(r.records()) == ["a", "b"] and r.synced
    assert r._watch("9") == "12"
    assert sorted(r.records()) == ["b", "c"]
    watch = calls[-1]
    assert watch["resource_version"] == "9" and watch["allow_watch_bookmarks"] is True


def test_a_watch_error_event_asks_for_a_relist() -> None:
    gone = json.dumps({"type": "ERROR", "object": {"code": 410}}).encode() + b"\n"
    r: Reflector[str] = Reflector("pods", lambda **kw: Response(b"", [gone]), lambda o: "x")
    assert r._watch("5") is None


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
    store = ConfigMapHistoryStore(None, "edl-system", attempts=attempts)
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
