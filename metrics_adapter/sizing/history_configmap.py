"""ConfigMapHistoryStore: the sizing history in one ConfigMap, shared by every adapter replica.

The ConfigMap (``--sizing-history-configmap`` in ``--sizing-history-namespace``) holds the
history's JSON under ``data.history``. Writes are compare-and-swap on the resourceVersion:
a replica that lost the race reads again and reapplies its change, so two replicas never
overwrite each other's observations. RBAC: ``get``/``update`` on that ConfigMap and
``create`` on configmaps in that namespace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from edl_sizing.history import HistoryError, SizeHistory
from metrics_adapter.errors import SourceError

log = logging.getLogger(__name__)
DATA_KEY = "history"


class ConfigMapHistoryStore:
    """Loads and updates the history stored in ``namespace/name``."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        name: str,
        attempts: int = 5,
        new_history: Callable[[], SizeHistory] = SizeHistory,
    ) -> None:
        self._core: Any = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self._attempts = attempts
        self._new = new_history

    def _read(self) -> tuple[SizeHistory, str | None]:
        """The stored history and its resourceVersion (None: no ConfigMap yet)."""
        history = self._new()
        try:
            cm = self._core.read_namespaced_config_map(
                self.name, self.namespace, _request_timeout=10
            )
        except ApiException as e:
            if e.status == 404:
                return history, None
            raise SourceError(
                f"cannot read ConfigMap {self.namespace}/{self.name}: {e.reason}"
            ) from e
        text = (cm.data or {}).get(DATA_KEY)
        if text:
            try:
                history.load_json(text)
            except HistoryError as e:
                log.error("sizing history in %s/%s is unreadable, starting afresh: %s",
                          self.namespace, self.name, e)  # fmt: skip
        return history, str(cm.metadata.resource_version)

    def load(self) -> SizeHistory:
        """The stored history (empty when there is none yet).

        Raises:
            SourceError: the API server could not be read.
        """
        return self._read()[0]

    def update(self, change: Callable[[SizeHistory], bool]) -> SizeHistory:
        """Read, apply ``change``, write back with compare-and-swap; retried on conflicts.

        Raises:
            SourceError: the API server failed, or every attempt lost a race.
        """
        for _ in range(self._attempts):
            history, version = self._read()
            if not change(history):
                return history
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/part-of": "edl"},
                },
                "data": {DATA_KEY: history.to_json()},
            }
            try:
                if version is None:
                    self._core.create_namespaced_config_map(
                        self.namespace, body, _request_timeout=10
                    )
                else:
                    body["metadata"]["resourceVersion"] = version
                    self._core.replace_namespaced_config_map(
                        self.name, self.namespace, body, _request_timeout=10
                    )
                return history
            except ApiException as e:
                if e.status != 409:
                    where = f"{self.namespace}/{self.name}"
                    raise SourceError(
                        f"cannot write ConfigMap {where}: {e.status} {e.reason}"
                    ) from e
        raise SourceError(
            f"ConfigMap {self.namespace}/{self.name}: "
            f"{self._attempts} writes in a row lost to concurrent ones"
        )
