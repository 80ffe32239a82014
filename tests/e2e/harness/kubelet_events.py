"""What the kubelets say they did, read from kube-apiserver's Events: for the e2e log.

Each kubelet reports every container it makes as Events on the pod (`Pulled`: the image, here
already present since the harness imports EDL's images; `Created`; `Started`), with its node
as the Event's source host. `KubeletEventLog` watches those Events (field selector
`source=kubelet`) for a whole pytest session, so that the kubelet layer's log can say, per test,
which containers the kubelets started, on which node, from which image, in their own words.
It asserts nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch

REASONS = ("Pulled", "Created", "Started")
"""The Events that say a container was made: its image, its creation, its start."""
WATCH_SECONDS = 60
"""One watch request's length; the log opens the next until it is stopped."""


@dataclass(frozen=True)
class KubeletEvent:
    """One Event a kubelet reported on a pod."""

    node: str
    namespace: str
    pod: str
    reason: str
    message: str

    def line(self) -> str:
        """``edl-node-2 ns/pod: Created container: trainer``."""
        return f"{self.node} {self.namespace}/{self.pod}: {self.message}"


class KubeletEventLog:
    """The kubelets' container Events seen since `start()`, in order of arrival."""

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)
        self._events: list[KubeletEvent] = []
        self._seen: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-events", daemon=True)

    def start(self) -> None:
        """Watches from now on (a background thread)."""
        self._thread.start()

    def stop(self) -> None:
        """Ends the watch within one request's length."""
        self._stop.set()
        self._thread.join(WATCH_SECONDS + 5)

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def since(self, mark: int) -> list[KubeletEvent]:
        """The Events that arrived after the first `mark`."""
        with self._lock:
            return self._events[mark:]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                stream = watch.Watch().stream(
                    self._core.list_event_for_all_namespaces,
                    field_selector="source=kubelet",
                    timeout_seconds=WATCH_SECONDS,
                )
                for item in stream:
                    self._keep(item["object"])
                    if self._stop.is_set():
                        return
            except Exception:  # a log, not a check: a failed watch is tried again
                self._stop.wait(1.0)

    def _keep(self, event: Any) -> None:
        key = (str(event.metadata.uid), int(event.count or 1))  # a repeat (a restart) counts up
        if event.reason not in REASONS or key in self._seen:
            return
        obj = event.involved_object
        kept = KubeletEvent(
            node=str(getattr(event.source, "host", None) or "?"),
            namespace=str(obj.namespace),
            pod=str(obj.name),
            reason=str(event.reason),
            message=str(event.message),
        )
        with self._lock:
            self._seen.add(key)
            self._events.append(kept)
