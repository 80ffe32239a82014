"""Reflector: one resource kind kept in step with the API server (list, watch, resync, backoff).

Both of the adapter's watchers (the trainer pods it scrapes, the cluster the sizer reads) use
it. The protocol is client-go's: a paged list gives the state and a resourceVersion; a watch
from that version streams the changes (the kubernetes client's `watch.Watch` frames them);
``410 Gone`` (the version was compacted away) means list again, at once; any other failure
means list again after a bounded, doubling backoff; every ``resync_s`` the watch is ended
and the kind relisted, so a missed event cannot live forever. Objects stay plain JSON
(`dict`): a watcher keeps only what it reads of them. A list reaches the sink page by page
(`ReflectorSink.replace` takes an iterator), so a list of 150,000 pods never exists as JSON in
the process at once: one page of it does.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

KubeObject = dict[str, Any]
"""One API object as the server's JSON."""

GONE = 410
T = TypeVar("T")


class ReflectorSink(Protocol):
    """Where a reflector puts what it learns (a watcher's own store)."""

    def replace(self, objects: Iterable[KubeObject]) -> None:
        """Everything there is, after a (re)list: what is not in `objects` is gone.

        `objects` yields the list's pages as they arrive; a page that fails raises through
        it, so a sink must change nothing before the iteration has completed.
        """

    def apply(self, event_type: str, obj: KubeObject) -> None:
        """One change: ``ADDED``, ``MODIFIED`` or ``DELETED``."""


class Watcher(Protocol):
    """The seam to `kubernetes.watch.Watch` (a test passes a fake API, not a fake watch)."""

    def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterable[Any]:
        """Events of a watch call of `func`."""

    def stop(self) -> None:
        """End the stream (from another thread)."""


@dataclass(frozen=True)
class Backoff:
    """Waits after failures: `first` seconds, doubling up to `cap`."""

    first: float = 1.0
    cap: float = 30.0

    def after(self, failures: int) -> float:
        """The wait after `failures` failures in a row (>= 1)."""
        return float(min(self.cap, self.first * 2 ** min(failures - 1, 30)))


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``/name`` for a cluster-scoped object)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _version_of(obj: Mapping[str, Any]) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


class Reflector:
    """Keeps one `ReflectorSink` in step with one kind, in its own thread until `stop`.

    Args:
        kind: a name for logs and error counts (``nodes``, ``pods``...).
        list_fn: the client's list function (``CoreV1Api.list_node`` ...), or a fake of it.
        sink: receives the lists and the changes.
        list_kwargs: what every list and watch call gets (``label_selector``, ``namespace``).
        on_error: called with `kind` on every failed list or watch (not on ``410 Gone``).
        page_size: objects per list page.
        watch_timeout_s: the server ends each watch after this long (then it is resumed).
        resync_s: relist at least this often (None: only after a failure or ``410``).
        backoff: the waits after failures in a row.
        watcher: builds the watch framing (the kubernetes client's by default).
        decode: a list page's JSON -> its body (``items``, ``metadata``); a watcher that
            keeps little of each object passes a decoder that builds no more than that.
    """

    MAX_PAGES = 100_000
    """A list of more pages is a server that keeps answering ``continue``: give up on it."""

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        sink: ReflectorSink,
        list_kwargs: Mapping[str, Any] | None = None,
        on_error: Callable[[str], None] = lambda _: None,
        page_size: int = 500,
        watch_timeout_s: int = 60,
        resync_s: float | None = 600.0,
        backoff: Backoff = Backoff(),
        watcher: Callable[[], Watcher] = k8s_watch.Watch,
        clock: Callable[[], float] = time.monotonic,
        decode: Callable[[bytes], Any] = json.loads,
    ) -> None:
        self.kind = kind
        self._list = list_fn
        self._sink = sink
        self._kwargs = dict(list_kwargs or {})
        self._on_error = on_error
        self._page = page_size
        self._watch_timeout = watch_timeout_s
        self._resync = resync_s
        self._backoff = backoff
        self._new_watch = watcher
        self._clock = clock
        self._decode = decode
        self._stop = threading.Event()
        self._watch: Watcher | None = None
        self._thread: threading.Thread | None = None
        self._listed_at = 0.0
        self.synced = False
        """The first list has completed."""
        self.lists = 0
        """Lists completed (a relist after ``410 Gone`` or a resync counts)."""

    def relist(self) -> str:
        """List everything (in pages) into the sink; returns the list's resourceVersion.

        Raises:
            ApiException: the server refused a page (``410``: a continue token expired).
        """
        listing = _Listing(
            self._list, self.kind, self._page, self._kwargs, self.MAX_PAGES, self._decode
        )
        self._sink.replace(listing.objects())
        self._listed_at = self._clock()
        self.lists += 1
        self.synced = True
        return listing.version

    def watch(self, version: str) -> str:
        """Watch from `version` until the server ends the stream, a resync is due or `stop`.

        Returns the last resourceVersion seen (bookmarks included), to resume from.

        Raises:
            ApiException: the watch failed; status 410 when `version` is too old.
        """
        watch = self._new_watch()
        self._watch = watch
        if self._stop.is_set():
            return version
        list_fn = self._list

        def as_json(**kwargs: Any) -> Any:
            """`list_fn` without its return type, so `Watch` leaves the objects as JSON.

            (Its ``deserialize=False`` does too, but then fails on an ``ERROR`` event with a
            KeyError instead of raising the ``410 Gone`` it reports, in client 37.)
            """
            return list_fn(**kwargs)

        events = watch.stream(
            as_json,
            resource_version=version,
            timeout_seconds=self._watch_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=self._watch_timeout + 10,
            **self._kwargs,
        )
        try:
            for event in events:
                kind, obj = event.get("type"), event.get("object") or {}
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._sink.apply(kind, obj)
                version = _version_of(obj) or version
                if self._stop.is_set() or self._resync_due():
                    watch.stop()
                    break
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # the stream's own finally releases the connection
        return version

    def _resync_due(self) -> bool:
        return self._resync is not None and self._clock() - self._listed_at >= self._resync

    def run(self) -> None:
        """List and watch until `stop` (the thread's body; a test may call it)."""
        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if version is None or self._resync_due():
                    version = self.relist()
                version = self.watch(version)
                failures = 0
            except ApiException as e:
                if self._stop.is_set():
                    return
                version = None
                if e.status == GONE:
                    log.info("%s: resourceVersion expired (410 Gone); listing again", self.kind)
                    continue
                failures = self._failed(e, failures)
            except Exception as e:
                if self._stop.is_set():
                    return
                version = None
                failures = self._failed(e, failures)

    def _failed(self, error: Exception, failures: int) -> int:
        failures += 1
        wait = self._backoff.after(failures)
        self._on_error(self.kind)
        log.warning("%s watch failed (%s); retrying in %.0fs", self.kind, error, wait)
        self._stop.wait(wait)
        return failures

    def start(self) -> None:
        """Start the list/watch thread."""
        self._thread = threading.Thread(target=self.run, name=f"reflector-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop, waiting at most `timeout_s` for the thread (a daemon) to end."""
        self._stop.set()
        watch = self._watch
        if watch is not None:
            try:
                watch.stop()
            except Exception as e:  # a half-closed socket may refuse the shutdown
                log.debug("%s: stopping the watch: %s", self.kind, e)
        if self._thread is not None:
            self._thread.join(timeout_s)


class _Listing:
    """One paged list: the objects page by page, and the version of the whole list."""

    def __init__(
        self,
        list_fn: Callable[..., Any],
        kind: str,
        page_size: int,
        kwargs: Mapping[str, Any],
        max_pages: int,
        decode: Callable[[bytes], Any] = json.loads,
    ) -> None:
        self._list = list_fn
        self._decode = decode
        self._kind = kind
        self._page = page_size
        self._kwargs = kwargs
        self._max_pages = max_pages
        self.version = ""
        """The list's resourceVersion, once `objects` has been iterated to the end."""

    def objects(self) -> Iterator[KubeObject]:
        """Every object of every page; each page is fetched when the previous one is used up.

        Raises:
            ApiException: a page was refused, or the server kept answering ``continue``.
        """
        token: str | None = None
        for _ in range(self._max_pages):
            kwargs: dict[str, Any] = {"limit": self._page, **self._kwargs}
            if token:
                kwargs["_continue"] = token
            resp = self._list(_preload_content=False, _request_timeout=60, **kwargs)
            body = self._decode(resp.data)
            del resp
            items = body.pop("items", None) or []
            meta = body.get("metadata") or {}
            self.version = str(meta.get("resourceVersion") or self.version)
            token = meta.get("continue")
            del body
            yield from items
            if not token:
                return
        raise ApiException(status=500, reason=f"{self._kind}: more than {self._max_pages} pages")


class RecordStore(Generic[T]):
    """A `ReflectorSink` that keeps one compact record per object (``None``: not kept).

    `convert` turns an object's JSON into what a watcher reads of it, so memory grows with
    that, not with the objects' size. With ``ordered``, `records` come in key order
    (``namespace/name``), kept as objects come and go (a sorted list of keys: an insertion
    or removal moves pointers, a round sorts nothing), for a reader that would otherwise sort
    150,000 records every time it looks.
    """

    def __init__(self, convert: Callable[[KubeObject], T | None], ordered: bool = False) -> None:
        self._convert = convert
        self._records: dict[str, T] = {}
        self._keys: list[str] | None = [] if ordered else None
        self._lock = threading.Lock()

    def records(self) -> list[T]:
        """The current records (a snapshot; in key order when ``ordered``)."""
        with self._lock:
            if self._keys is None:
                return list(self._records.values())
            records = self._records
            return [records[k] for k in self._keys]

    def replace(self, objects: Iterable[KubeObject]) -> None:
        """Everything there is (after a list); the old records stay until it is complete."""
        fresh: dict[str, T] = {}
        for obj in objects:
            record = self._convert(obj)
            if record is not None:
                fresh[object_key(obj)] = record
        keys = sorted(fresh) if self._keys is not None else None
        with self._lock:
            self._records = fresh
            self._keys = keys

    def apply(self, event_type: str, obj: KubeObject) -> None:
        """One change."""
        record = None if event_type == "DELETED" else self._convert(obj)
        key = object_key(obj)
        with self._lock:
            if record is None:
                if self._records.pop(key, None) is not None and self._keys is not None:
                    del self._keys[bisect.bisect_left(self._keys, key)]
            else:
                if key not in self._records and self._keys is not None:
                    bisect.insort(self._keys, key)
                self._records[key] = record
