"""The Reflector against a fake API behind the client's list-function seam.

The kubernetes client's own `watch.Watch` frames the fake's streams, as it frames the real
server's: what is tested is our list/watch/relist protocol, not a fake of the framing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from metrics_adapter.kube.reflector import Backoff, RecordStore, Reflector
from tests.support.waiting import wait_for

pytestmark = pytest.mark.unit


class Socket:
    """What `Watch.stop` shuts down to unblock a read."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def shutdown(self, how: int) -> None:
        self.closed.set()


class Response:
    """A urllib3 response as the client returns it with ``_preload_content=False``."""

    status = 200

    def __init__(self, body: bytes = b"", chunks: list[bytes] | None = None, hang: bool = False):
        self.data = body
        self._chunks = chunks or []
        self._hang = hang
        self.connection = type("Conn", (), {"sock": Socket()})()
        self.released = False
        self.streaming = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        self.streaming.set()
        yield from self._chunks
        if self._hang:  # a quiet watch: nothing until the socket is shut down
            self.connection.sock.closed.wait(30)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        self.released = True


def obj(name: str, rv: str, value: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "v": value}


def lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


class FakeApi:
    """A list function: `pages` answer lists (by continue token), `watches` answer watches."""

    def __init__(self, pages: list[dict[str, Any]], watches: list[Response | Exception]) -> None:
        self.pages = pages
        self.watches = watches
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, **kw: Any) -> Response:
        with self.lock:
            self.calls.append(kw)
            if kw.get("watch"):
                answer = self.watches.pop(0) if self.watches else Response(hang=True)
                if isinstance(answer, Exception):
                    raise answer
                return answer
            page = self.pages[int(kw.get("_continue") or 0) % len(self.pages)]
            return Response(json.dumps(page).encode())

    def lists(self) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if not c.get("watch")]

    def watch_calls(self) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c.get("watch")]


def values(store: RecordStore[str]) -> list[str]:
    return sorted(store.records())


def keep_value(o: dict[str, Any]) -> str | None:
    return None if o["v"] == "skip" else str(o["v"])


def test_a_paged_list_then_a_watch_keeps_the_records_and_the_version() -> None:
    pages: list[dict[str, Any]] = [
        {"items": [obj("a", "1", "a")], "metadata": {"continue": "1", "resourceVersion": "9"}},
        {"items": [obj("b", "2", "b"), obj("s", "3", "skip")], "metadata": {}},
    ]
    stream = lines(
        {"type": "ADDED", "object": obj("c", "10", "c")},
        {"type": "MODIFIED", "object": obj("b", "11", "b2")},
        {"type": "DELETED", "object": obj("a", "12", "a")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
    )
    # one event split across chunks, as a chunked HTTP stream delivers it
    api = FakeApi(pages, [Response(chunks=[stream[:7], stream[7:40], stream[40:]])])
    store: RecordStore[str] = RecordStore(keep_value)
    r = Reflector("things", api, store, {"label_selector": "app=x"}, page_size=1)

    assert r.relist() == "9" and values(store) == ["a", "b"] and r.synced
    assert [c.get("_continue") for c in api.lists()] == [None, "1"]
    assert all(c["limit"] == 1 and c["label_selector"] == "app=x" for c in api.lists())
    assert r.watch("9") == "15"  # the bookmark's version is where to resume
    assert values(store) == ["b2", "c"]
    watch = api.watch_calls()[-1]
    assert watch["resource_version"] == "9" and watch["allow_watch_bookmarks"] is True
    assert watch["label_selector"] == "app=x" and watch["timeout_seconds"] == 60


def test_a_list_reaches_the_store_page_by_page_and_a_failed_page_changes_nothing() -> None:
    # 150,000 pods must not sit in the process as JSON at once: the next page is fetched only
    # when the store has taken the previous one. A page refused midway leaves the old records.
    pages: list[dict[str, Any]] = [
        {"items": [obj(f"p{i}", str(i), f"p{i}")], "metadata": {"continue": str(i + 1)}}
        for i in range(3)
    ]
    pages[-1]["metadata"] = {"resourceVersion": "7"}
    api = FakeApi(pages, [])
    lists_when_seen: list[int] = []

    def keep(o: dict[str, Any]) -> str | None:
        lists_when_seen.append(len(api.lists()))
        return keep_value(o)

    store: RecordStore[str] = RecordStore(keep)
    r = Reflector("pods", api, store, page_size=1)
    assert r.relist() == "7" and values(store) == ["p0", "p1", "p2"]
    assert lists_when_seen == [1, 2, 3]

    class Refused(FakeApi):
        def __call__(self, **kw: Any) -> Response:
            if kw.get("_continue") == "2":
                raise ApiException(status=410, reason="continue token expired")
            return super().__call__(**kw)

    fresh = [{**p, "items": [obj("new", "9", "new")]} for p in pages]
    again = Reflector("pods", Refused(fresh, []), store, page_size=1)
    with pytest.raises(ApiException):
        again.relist()
    assert values(store) == ["p0", "p1", "p2"]


def run_in_thread(r: Reflector) -> threading.Thread:
    thread = threading.Thread(target=r.run, daemon=True)
    thread.start()
    return thread


def test_410_gone_relists_at_once_without_counting_an_error() -> None:
    gone = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
    pages = [{"items": [obj("a", "1", "a")], "metadata": {"resourceVersion": "5"}}]
    api = FakeApi(pages, [Response(chunks=[lines(gone)])])
    errors: list[str] = []
    store: RecordStore[str] = RecordStore(keep_value)
    # A backoff of an hour: a relist that waited for it would never come in the test's time.
    r = Reflector("pods", api, store, on_error=errors.append, backoff=Backoff(3600, 3600))
    thread = run_in_thread(r)
    try:
        wait_for(
            lambda: len(api.lists()) >= 2, timeout_s=30, what="a relist after 410", interval_s=0.05
        )
        wait_for(
            lambda: len(api.watch_calls()) >= 2, timeout_s=30, what="a new watch", interval_s=0.05
        )
    finally:
        r.stop()
    assert errors == []
    assert api.watch_calls()[1]["resource_version"] == "5"  # from the fresh list
    wait_for(lambda: not thread.is_alive(), timeout_s=30, what="the reflector to stop")


def test_a_failed_watch_counts_an_error_and_relists_after_the_backoff() -> None:
    pages = [{"items": [], "metadata": {"resourceVersion": "3"}}]
    api = FakeApi(pages, [ConnectionResetError("reset by peer")])
    errors: list[str] = []
    r = Reflector(
        "nodes", api, RecordStore(keep_value), on_error=errors.append, backoff=Backoff(0.01)
    )
    thread = run_in_thread(r)
    try:
        wait_for(lambda: len(api.lists()) >= 2, timeout_s=30, what="a relist", interval_s=0.05)
    finally:
        r.stop()
    assert errors == ["nodes"]
    wait_for(lambda: not thread.is_alive(), timeout_s=30, what="the reflector to stop")


def test_the_backoff_doubles_up_to_its_cap() -> None:
    assert [Backoff(1, 30).after(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert Backoff(1, 30).after(10_000) == 30


def test_a_resync_ends_the_watch_and_lists_again() -> None:
    now = [0.0]
    pages = [{"items": [obj("a", "1", "a")], "metadata": {"resourceVersion": "2"}}]
    events = [{"type": "MODIFIED", "object": obj("a", str(3 + i), "a")} for i in range(3)]
    api = FakeApi(pages, [Response(chunks=[lines(*events)], hang=True)])
    r = Reflector("pods", api, RecordStore(keep_value), resync_s=60, clock=lambda: now[0])
    r.relist()
    now[0] = 61.0  # the first event arrives after the resync is due
    assert r.watch("2") == "3"  # stopped at the first event, not after the quiet tail
    assert r.lists == 1


def test_stop_ends_a_quiet_watch() -> None:
    pages = [{"items": [], "metadata": {"resourceVersion": "1"}}]
    quiet = Response(hang=True)
    api = FakeApi(pages, [quiet])
    r = Reflector("pods", api, RecordStore(keep_value))
    thread = run_in_thread(r)
    assert quiet.streaming.wait(30), "the watch did not start"
    r.stop()
    assert quiet.connection.sock.closed.is_set()
    wait_for(lambda: not thread.is_alive(), timeout_s=30, what="the reflector to stop")


def test_an_ordered_store_keeps_its_records_in_key_order_as_objects_come_and_go() -> None:
    # The sizer reads 150,000 pods in key order every round: the store keeps that order as
    # events arrive instead of the round sorting them.
    store: RecordStore[str] = RecordStore(keep_value, ordered=True)
    store.replace(
        [obj("c", "1", "c"), obj("a", "2", "a"), obj("e", "3", "e"), obj("s", "4", "skip")]
    )
    assert store.records() == ["a", "c", "e"]
    store.apply("ADDED", obj("b", "5", "b"))
    store.apply("ADDED", obj("f", "6", "f"))
    store.apply("MODIFIED", obj("c", "7", "c2"))
    store.apply("DELETED", obj("e", "8", "e"))
    store.apply("DELETED", obj("zz", "9", "never seen"))
    store.apply("MODIFIED", obj("a", "10", "skip"))  # no longer kept: gone from the order too
    assert store.records() == ["b", "c2", "f"]
    store.apply("ADDED", obj("a", "11", "a3"))
    assert store.records() == ["a3", "b", "c2", "f"]
