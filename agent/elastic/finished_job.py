"""A finished job gives its hardware back: its trainer Deployment goes to 0 replicas.

With ``--on-finished scale-to-zero`` every agent that learns the job is finished calls
:meth:`DeploymentRetirement.retire`: it records the Event ``JobFinished`` on the Deployment
under a name made of the Deployment's uid, so only the first agent's is created (the others
get 409), then sets the scale subresource to 0 (idempotent). The ReplicaSet deletes the pods
at once, so their requests are free for the scheduler and the sizer (which sizes no Deployment
at 0 replicas and counts no pod being deleted); the HPA does not act on a target at 0
replicas, so nothing scales the job back up.

Least privilege: the agents touch only the ``deployments/scale`` subresource of their own
Deployment (``get`` for its uid, ``patch`` to 0; the ValidatingAdmissionPolicy shipped with the
charts and manifests lets a trainer set nothing but 0 there), never the Deployment itself,
whose pod template a compromised trainer could otherwise rewrite. The finished state lives in
the job's own world ConfigMap (`agent.elastic.kubernetes_store`: the label
``edl.paddlepaddle.org/state=finished``, the step and time in annotations).

What a user sees: ``kubectl get deploy`` (``0/0``), ``kubectl get cm -L
edl.paddlepaddle.org/state`` (``edl-<job>-world ... finished``) and ``kubectl get events
--field-selector reason=JobFinished``. A job failed by its failure budget
(`agent.elastic.failures`) goes the same way, with ``state=failed`` and a Warning Event
``JobFailed`` that names its last failures' exit statuses and log lines.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from agent.elastic.failures import TrainerFailure, failed_message
from agent.protocol.errors import ElasticError

log = logging.getLogger(__name__)

EVENT_REASON = "JobFinished"
FAILED_REASON = "JobFailed"
"""The Warning Event of a job whose trainer failures exceeded its budget (`fail`)."""


class RetirementFailed(ElasticError):
    """The Deployment could not be scaled to 0 (RBAC, API unreachable); the cause is kept."""


class DeploymentApi(Protocol):
    """The few calls retirement makes, on the scale subresource (a fake in the unit tests)."""

    def read_uid(self, name: str) -> str:
        """The Deployment's uid, from its scale subresource."""
        ...

    def scale_to_zero(self, name: str) -> None:
        """Sets the scale subresource's replicas to 0."""
        ...

    def event(self, name: str, uid: str, reason: str, message: str, warning: bool = False) -> bool:
        """Records a Normal (`warning`: Warning) Event on the Deployment, named by `event_name`.

        Returns False when that Event exists already (another agent recorded it first) or
        could not be recorded (logged: an Event is for people, its loss must not keep the pods).
        """
        ...


def event_name(deployment: str, uid: str, reason: str) -> str:
    """One Event per Deployment and reason (by uid: a new Deployment of that name gets its own)."""
    return f"{deployment}.{reason.lower()}.{uid}"[:253]


@dataclass
class DeploymentRetirement:
    """Scales this job's Deployment to 0, and says so on it once."""

    api: DeploymentApi
    deployment: str
    job: str
    attempts: int = 3

    def retire(self, step: int | None) -> bool:
        """Announces and scales to 0; True when this call recorded the Event (the first).

        Raises:
            RetirementFailed: every attempt failed; the last error is the cause.
        """
        at = "" if step is None else f" at step {step}"
        message = f"job {self.job} finished{at}; scaled to 0 replicas to free its resources"
        return self._scale_down(EVENT_REASON, message, "finished", warning=False)

    def fail(self, failures: tuple[TrainerFailure, ...]) -> bool:
        """As `retire`, for a failed job: a Warning ``JobFailed`` naming its last failures."""
        message = failed_message(self.job, failures) + " (scaled to 0 replicas)"
        return self._scale_down(FAILED_REASON, message, "failed", warning=True)

    def _scale_down(self, reason: str, message: str, how: str, warning: bool) -> bool:
        last: Exception | None = None
        announced = False  # an attempt that failed after its Event counts as the first
        for _ in range(max(1, self.attempts)):
            try:
                uid = self.api.read_uid(self.deployment)
                announced = (
                    self.api.event(self.deployment, uid, reason, message, warning=warning)
                    or announced
                )
                self.api.scale_to_zero(self.deployment)
            except Exception as e:  # the client's ApiException, urllib3 errors
                last = e
                continue
            if announced:
                log.info("job %s %s: Deployment %s scaled to 0", self.job, how, self.deployment)
            return announced
        raise RetirementFailed(
            f"cannot scale Deployment {self.deployment} of {how} job {self.job} to 0: {last}"
        ) from last


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

    def read_uid(self, name: str) -> str:
        """GET the scale subresource (its metadata carries the Deployment's uid)."""
        scale = self._apps.read_namespaced_deployment_scale(
            name, self._ns, _request_timeout=self._timeout
        )
        return str(scale.metadata.uid or "")

    def scale_to_zero(self, name: str) -> None:
        """PATCH the scale subresource."""
        self._apps.patch_namespaced_deployment_scale(
            name, self._ns, {"spec": {"replicas": 0}}, _request_timeout=self._timeout
        )

    def event(self, name: str, uid: str, reason: str, message: str, warning: bool = False) -> bool:
        """POST a core/v1 Event named by `event_name`; False on 409 or a failure (logged)."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(name, uid, reason), "namespace": self._ns},
            "involvedObject": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": name,
                "namespace": self._ns,
                "uid": uid,
            },
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": "edl-agent"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(self._ns, body, _request_timeout=self._timeout)
        except self._exc as e:
            if getattr(e, "status", 0) != 409:  # 409: another agent's is there already
                log.warning("event %s on Deployment %s not recorded: %s", reason, name, e)
            return False
        return True
