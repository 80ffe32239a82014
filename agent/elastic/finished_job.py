"""A finished job gives its hardware back: its trainer Deployment goes to 0 replicas.

With ``--on-finished scale-to-zero`` every agent that learns the job is finished calls
:meth:`DeploymentRetirement.retire`. The first to get there labels the Deployment
``edl.paddlepaddle.org/state=finished`` (with the step and time in annotations; written with
the Deployment's resourceVersion, so exactly one agent wins) and records the Event
``JobFinished`` on it; every one then sets the scale subresource to 0 (idempotent). The
ReplicaSet deletes the pods at once, so their requests are free for the scheduler and the
sizer (a pod being deleted no longer counts); the HPA does not act on a target at 0
replicas, so nothing scales the job back up.

What a user sees: ``kubectl get deploy -L edl.paddlepaddle.org/state`` (``0/0``,
``finished``) and ``kubectl get events --field-selector reason=JobFinished``.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from agent.protocol.errors import ElasticError

log = logging.getLogger(__name__)

STATE_LABEL = "edl.paddlepaddle.org/state"
FINISHED = "finished"
FINISHED_STEP = "edl.paddlepaddle.org/finished-at-step"
FINISHED_TIME = "edl.paddlepaddle.org/finished-at"
EVENT_REASON = "JobFinished"


class RetirementFailed(ElasticError):
    """The Deployment could not be scaled to 0 (RBAC, API unreachable); the cause is kept."""


class DeploymentApi(Protocol):
    """The few Deployment calls retirement makes (a fake in the unit tests)."""

    def read(self, name: str) -> dict[str, Any]:
        """The Deployment's metadata: labels, uid, resourceVersion."""
        ...

    def mark(self, name: str, resource_version: str, labels: dict[str, str],
             annotations: dict[str, str]) -> bool:  # fmt: skip
        """Adds labels and annotations if the object is still at `resource_version`.

        Returns False when another writer changed it first (HTTP 409).
        """
        ...

    def scale_to_zero(self, name: str) -> None:
        """Sets the scale subresource's replicas to 0."""
        ...

    def event(self, name: str, uid: str, reason: str, message: str) -> None:
        """Records a Normal Event on the Deployment."""
        ...


@dataclass
class DeploymentRetirement:
    """Scales this job's Deployment to 0 once, and says so on it."""

    api: DeploymentApi
    deployment: str
    job: str
    attempts: int = 3

    def retire(self, step: int | None, now: dt.datetime | None = None) -> bool:
        """Marks, announces and scales to 0; True when this call wrote the mark.

        Raises:
            RetirementFailed: every attempt failed; the last error is the cause.
        """
        when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        last: Exception | None = None
        for _ in range(max(1, self.attempts)):
            try:
                return self._retire_once(step, when)
            except RetirementFailed:
                raise
            except Exception as e:  # the client's ApiException, urllib3 errors
                last = e
        raise RetirementFailed(
            f"cannot scale Deployment {self.deployment} of finished job {self.job} to 0: {last}"
        ) from last

    def _retire_once(self, step: int | None, when: str) -> bool:
        meta = self.api.read(self.deployment)
        labels = meta.get("labels") or {}
        wrote = False
        if labels.get(STATE_LABEL) != FINISHED:
            annotations = {FINISHED_TIME: when}
            if step is not None:
                annotations[FINISHED_STEP] = str(step)
            wrote = self.api.mark(
                self.deployment,
                str(meta.get("resourceVersion") or ""),
                {STATE_LABEL: FINISHED},
                annotations,
            )
            if wrote:
                at = "" if step is None else f" at step {step}"
                self.api.event(
                    self.deployment,
                    str(meta.get("uid") or ""),
                    EVENT_REASON,
                    f"job {self.job} finished{at}; scaled to 0 replicas to free its resources",
                )
        self.api.scale_to_zero(self.deployment)
        if wrote:
            log.info("job %s finished: Deployment %s scaled to 0", self.job, self.deployment)
        return wrote


class ClientDeploymentApi:
    """`DeploymentApi` through the official `kubernetes` client, in one namespace."""

    def __init__(self, apps: Any, core: Any, namespace: str, api_exception: type[Exception],
                 timeout_s: float = 10.0) -> None:  # fmt: skip
        self._apps, self._core, self._ns = apps, core, namespace
        self._exc = api_exception
        self._timeout = timeout_s

    @classmethod
    def connect(cls, namespace: str) -> ClientDeploymentApi:
        """In-cluster config, else the kubeconfig."""
        from kubernetes import client

        from agent.elastic.kubernetes_store import load_client_config

        load_client_config()
        return cls(client.AppsV1Api(), client.CoreV1Api(), namespace, client.ApiException)

    def read(self, name: str) -> dict[str, Any]:
        """GET the Deployment."""
        d = self._apps.read_namespaced_deployment(name, self._ns, _request_timeout=self._timeout)
        m = d.metadata
        return {"labels": dict(m.labels or {}), "uid": m.uid, "resourceVersion": m.resource_version}

    def mark(self, name: str, resource_version: str, labels: dict[str, str],
             annotations: dict[str, str]) -> bool:  # fmt: skip
        """A strategic-merge PATCH carrying the resourceVersion: 409 when it moved on."""
        body = {
            "metadata": {
                "resourceVersion": resource_version,
                "labels": labels,
                "annotations": annotations,
            }
        }
        try:
            self._apps.patch_namespaced_deployment(
                name, self._ns, body, _request_timeout=self._timeout
            )
        except self._exc as e:
            if getattr(e, "status", 0) == 409:
                return False
            raise
        return True

    def scale_to_zero(self, name: str) -> None:
        """PATCH the scale subresource."""
        self._apps.patch_namespaced_deployment_scale(
            name, self._ns, {"spec": {"replicas": 0}}, _request_timeout=self._timeout
        )

    def event(self, name: str, uid: str, reason: str, message: str) -> None:
        """POST a core/v1 Event; a failure is only logged."""
        now = dt.datetime.now(dt.UTC)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": self._ns},
            "involvedObject": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": name,
                "namespace": self._ns,
                "uid": uid,
            },
            "reason": reason,
            "message": message,
            "type": "Normal",
            "source": {"component": "edl-agent"},
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(self._ns, body, _request_timeout=self._timeout)
        except self._exc as e:  # an Event is for people: its loss must not keep the pods
            log.warning("event %s on Deployment %s not recorded: %s", reason, name, e)
