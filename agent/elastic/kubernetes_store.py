"""Membership store on Kubernetes: a Lease per member, the world record in a ConfigMap.

Leases (`coordination.k8s.io/v1`) are the API server's own liveness records: each agent renews
``edl-<job>-<member>`` and a member's description rides in an annotation. The world record is
the ``world`` key of ConfigMap ``edl-<job>-world``, replaced only with the resourceVersion we
read (optimistic concurrency: a 409 means someone else wrote first). `KubernetesApi` is the
seam: `ClientApi` talks to the cluster through the official client; tests inject a fake.

The world ConfigMap also says, in its labels, what its record says: a finished job's carries
``edl.paddlepaddle.org/state=finished`` (``failed``: its trainer failures exceeded the budget,
`agent.elastic.failures`) and the step and time in annotations
(``kubectl get cm -L edl.paddlepaddle.org/state``), written in the same compare-and-swap as the
finished record, so the two never disagree. It is the job's own object: the agents need no
write access to their Deployment to say the job is done (`agent.elastic.finished_job`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agent.elastic.errors import StoreUnavailable, WatchForbidden, WorldRecordInvalid
from agent.elastic.job_status import PHASE_KEY, STATUS_KEYS, JobPhase, ended_status
from agent.elastic.kubernetes_watch import KubernetesWatch
from agent.elastic.store import Heartbeat, StoreWatch, VersionedRecord
from agent.elastic.world import Member, World
from agent.errors import ConfigError

LABEL_JOB = "edl.paddlepaddle.org/job"
ANNOTATION_MEMBER = "edl.paddlepaddle.org/member"
STATE_LABEL = "edl.paddlepaddle.org/state"
"""On the world ConfigMap: ``finished`` once the record is."""
FINISHED = "finished"
FAILED = "failed"
"""The state of a job failed by its failure budget (`agent.elastic.failures`)."""
LAST_FAILURE = "edl.paddlepaddle.org/last-failure"
"""On the world ConfigMap: the newest trainer failure the record keeps, in one line."""
FINISHED_STEP = "edl.paddlepaddle.org/finished-at-step"
FINISHED_TIME = "edl.paddlepaddle.org/finished-at"
WORLD_KEY = "world"
COORDINATOR_KEY = "coordinator"
"""The world ConfigMap's key naming the job's coordinator (a `Member.key`), beside the record:
the one member that watches the heartbeats (`agent.elastic.coordinator`)."""
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubernetesApi(Protocol):
    """The few API calls the store needs; every method raises `StoreUnavailable` on errors."""

    def get_config_map(self, name: str) -> tuple[dict[str, str], str, dict[str, str]] | None:
        """(data, resourceVersion, annotations), or None when it does not exist."""

    def create_config_map(
        self, name: str, data: dict[str, str], labels: dict[str, str], annotations: dict[str, str]
    ) -> bool:
        """False when it already exists."""

    def replace_config_map(
        self,
        name: str,
        data: dict[str, str],
        resource_version: str,
        labels: dict[str, str],
        annotations: dict[str, str],
    ) -> bool:
        """False on a resourceVersion conflict (or when it vanished)."""

    def list_leases(self, label_selector: str) -> list[dict[str, Any]]:
        """Leases as ``{"name", "holder", "renew_time", "annotations"}``."""

    def read_lease(self, name: str) -> dict[str, Any] | None:
        """One Lease as `list_leases` gives them, or None when it does not exist."""

    def renew_lease(
        self,
        name: str,
        holder: str,
        renew_time: str,
        annotations: dict[str, str],
        labels: dict[str, str],
    ) -> None:
        """Create the lease, or update its holder, renewTime and annotations."""

    def delete_lease(self, name: str) -> None:
        """Delete it; no error when it is gone."""

    def watch_leases(
        self, label_selector: str, timeout_seconds: int
    ) -> Iterator[tuple[str, str, str]]:
        """The API server's watch of the Leases: (event type, name, holder) until it ends."""

    def watch_config_map(self, name: str, timeout_seconds: int) -> Iterator[tuple[str, str]]:
        """The watch of ConfigMap `name`: (event type, a digest of its data) until it ends.

        The digest changes with the world record or the coordinator's name, not with the
        status annotations rank 0 rewrites every 10 s: those wake nobody.
        """


def load_client_config() -> None:
    """The pod's ServiceAccount, else the kubeconfig (KUBECONFIG, ~/.kube/config).

    Raises:
        ConfigError: neither is there (an agent started outside a cluster): one line.
    """
    from kubernetes import config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException as in_cluster:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as e:
            raise ConfigError(
                f"--membership kubernetes: not in a pod ({in_cluster}) and no usable kubeconfig "
                f"({e}); run it in a pod, or set KUBECONFIG"
            ) from e


def pod_owner(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The ownerReference to this pod (POD_NAME, POD_UID), or None outside a pod."""
    name, uid = env.get("POD_NAME", "").strip(), env.get("POD_UID", "").strip()
    if not name or not uid:
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}


def job_namespace(env: Mapping[str, str]) -> str:
    """EDL_NAMESPACE, else the pod's own namespace (its ServiceAccount's), else `default`."""
    namespace = env.get("EDL_NAMESPACE", "").strip()
    if namespace:
        return namespace
    try:
        return SA_NAMESPACE.read_text().strip()
    except OSError:
        return "default"


def dns_name(*parts: str) -> str:
    """A DNS-1123 object name built from `parts`."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return name[:253].rstrip("-") or "edl"


def micro_time(when: datetime) -> str:
    """Kubernetes MicroTime text."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str) -> float:
    """Seconds since the epoch of a MicroTime (or RFC 3339) text; 0 when unparseable."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class KubernetesStore:
    """A `MembershipStore` made of Leases and one ConfigMap in one namespace.

    Coordinated (`agent.elastic.coordinator`): the ConfigMap's ``coordinator`` key names the
    one member that watches the Leases; the others watch the ConfigMap alone. `coordinated`
    False is the membership before issue 38 (every member watches every Lease), kept for the
    bench's *before* figures (`bench/scale_membership.py`).
    """

    def __init__(
        self, api: KubernetesApi, job: str, clock: Any = None, coordinated: bool = True
    ) -> None:
        self._api = api
        self._job = job
        self._coordinated = coordinated
        self._claim: tuple[str, str] = ("", "")
        """(version, coordinator) as last read: a world write with that version keeps it."""
        self._now = clock or (lambda: datetime.now(UTC))
        self._world_name = dns_name("edl", job, "world")
        self._status: tuple[str, dict[str, str]] = ("", {})
        """The status annotations of the version last read: a world write carries them."""

    @classmethod
    def from_environment(cls, job: str, env: Mapping[str, str]) -> KubernetesStore:
        """In-cluster config (or ~/.kube/config outside), namespace from EDL_NAMESPACE.

        With POD_NAME and POD_UID (the downward API's `metadata.uid`) each member's Lease is
        owned by its pod, so the garbage collector removes it with the pod even when the
        agent could not (its Role already gone, as on `helm uninstall`, or a SIGKILL).
        """
        return cls(ClientApi.connect(job_namespace(env), pod_owner(env)), job)

    @property
    def coordinated(self) -> bool:
        """True (but for the bench's *before*): one member coordinates."""
        return self._coordinated

    def watch(self, members: bool = True) -> StoreWatch:
        """The API server's watch on the world ConfigMap, and the job's Leases with `members`."""
        return KubernetesWatch(
            self._api,
            f"{LABEL_JOB}={dns_name(self._job)}",
            self._world_name,
            members=members or not self._coordinated,
        )

    def _lease_name(self, member: Member) -> str:
        return dns_name("edl", self._job, member.id)

    def beat(self, member: Member) -> None:
        """Renew this member's Lease."""
        self._api.renew_lease(
            self._lease_name(member),
            member.key,
            micro_time(self._now()),
            {ANNOTATION_MEMBER: json.dumps(member.to_dict())},
            {LABEL_JOB: dns_name(self._job)},
        )

    def remove(self, member: Member) -> None:
        """Delete this member's Lease."""
        self._api.delete_lease(self._lease_name(member))

    def heartbeats(self) -> list[Heartbeat]:
        """Every Lease of the job that describes a member."""
        leases = self._api.list_leases(f"{LABEL_JOB}={dns_name(self._job)}")
        return [hb for hb in map(_heartbeat, leases) if hb is not None]

    def heartbeat_of(self, member_id: str) -> Heartbeat | None:
        """The Lease of member `member_id` (one object: a follower's check of its coordinator)."""
        lease = self._api.read_lease(dns_name("edl", self._job, member_id))
        return None if lease is None else _heartbeat(lease)

    def claim(self, key: str, expected_version: str) -> bool:
        """Names `key` the coordinator in the ConfigMap (created without a world if need be).

        Compare-and-swap on the resourceVersion read: the world, labels and annotations stay.
        """
        if not expected_version:
            labels = {LABEL_JOB: dns_name(self._job)}
            return self._api.create_config_map(self._world_name, {COORDINATOR_KEY: key}, labels, {})
        found = self._api.get_config_map(self._world_name)
        if found is None or found[1] != expected_version:
            return False
        data, version, annotations = found
        labels, _ = self._world_meta(data.get(WORLD_KEY, ""))
        if PHASE_KEY in annotations:
            labels.setdefault(PHASE_KEY, annotations[PHASE_KEY])
        data = {**data, COORDINATOR_KEY: key}
        return self._api.replace_config_map(self._world_name, data, version, labels, annotations)

    def read_world(self) -> VersionedRecord:
        """The ``world`` key of the ConfigMap and its resourceVersion."""
        found = self._api.get_config_map(self._world_name)
        if found is None:
            return VersionedRecord(None, "")
        data, version, annotations = found
        self._status = (version, {k: v for k, v in annotations.items() if k in STATUS_KEYS})
        coordinator = data.get(COORDINATOR_KEY, "") if self._coordinated else ""
        self._claim = (version, coordinator)
        if WORLD_KEY not in data and set(data) == {COORDINATOR_KEY}:
            return VersionedRecord(None, version, coordinator)  # claimed before a first world
        # A ConfigMap without the key was emptied by hand: hand the parser "" so it repairs.
        return VersionedRecord(data.get(WORLD_KEY, ""), version, coordinator)

    def write_world(self, text: str, expected_version: str) -> bool:
        """Create (version "") or replace with the resourceVersion we read.

        The labels and annotations say whether the record is finished; the coordinator named
        at the version read stays named.
        """
        data = {WORLD_KEY: text}
        claim_version, coordinator = self._claim
        if expected_version and claim_version == expected_version and coordinator:
            data[COORDINATOR_KEY] = coordinator
        labels, annotations = self._world_meta(text)
        version, status = self._status
        if expected_version and version == expected_version:  # the status stays as it was
            if PHASE_KEY in annotations:  # the record ends the job: no running figures stay
                step = annotations.get(FINISHED_STEP)
                phase = JobPhase(annotations[PHASE_KEY])
                status = ended_status(status, phase, None if step is None else int(step))
            annotations = {**status, **annotations}
            if PHASE_KEY in status:
                labels.setdefault(PHASE_KEY, status[PHASE_KEY])
        if not expected_version:
            return self._api.create_config_map(self._world_name, data, labels, annotations)
        return self._api.replace_config_map(
            self._world_name, data, expected_version, labels, annotations
        )

    def _world_meta(self, text: str) -> tuple[dict[str, str], dict[str, str]]:
        labels = {LABEL_JOB: dns_name(self._job)}
        annotations: dict[str, str] = {}
        try:
            world = World.from_json(text)
        except WorldRecordInvalid:
            return labels, annotations  # Membership writes only valid records
        if world.finished:
            labels[STATE_LABEL] = FAILED if world.failed else FINISHED
            phase = JobPhase.FAILED if world.failed else JobPhase.SUCCEEDED
            labels[PHASE_KEY] = annotations[PHASE_KEY] = phase.value
            annotations[FINISHED_TIME] = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
            if world.finished_at_step is not None:
                annotations[FINISHED_STEP] = str(world.finished_at_step)
        if world.failures:
            annotations[LAST_FAILURE] = world.failures[-1].describe()
        return labels, annotations

    def write_status(self, fields: Mapping[str, str]) -> bool:
        """Replaces the status annotations and the phase label of the world ConfigMap.

        The data and every other annotation stay (a replace with the resourceVersion read:
        a world written meanwhile makes this one fail, and the next report tries again).
        """
        found = self._api.get_config_map(self._world_name)
        if found is None:
            return False
        data, version, current = found
        labels, _ = self._world_meta(data.get(WORLD_KEY, ""))
        annotations = {**current, **fields}
        if PHASE_KEY in fields:
            labels.setdefault(PHASE_KEY, fields[PHASE_KEY])
        written = self._api.replace_config_map(self._world_name, data, version, labels, annotations)
        if written:
            self._status = ("", {})  # the version moved on: the next read caches it again
        return written


def data_digest(data: Mapping[str, str]) -> str:
    """A short digest of a ConfigMap's data: the same exactly while the data is."""
    text = json.dumps(dict(data), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _heartbeat(lease: Mapping[str, Any]) -> Heartbeat | None:
    """The member a Lease describes (None: not a member's Lease, or unreadable)."""
    raw = (lease.get("annotations") or {}).get(ANNOTATION_MEMBER)
    renew = str(lease.get("renew_time") or "")
    try:
        member = Member.from_dict(json.loads(raw or ""))
    except (ValueError, WorldRecordInvalid):
        return None
    return Heartbeat(member, renew, parse_micro_time(renew))


class ClientApi:
    """`KubernetesApi` through the official `kubernetes` client."""

    def __init__(
        self,
        core: Any,
        coordination: Any,
        namespace: str,
        api_exception: type[Exception],
        owner: dict[str, Any] | None = None,
    ) -> None:
        self._core = core
        self._coord = coordination
        self._ns = namespace
        self._exc = api_exception
        self._owner = owner

    @classmethod
    def connect(cls, namespace: str, owner: dict[str, Any] | None = None) -> ClientApi:
        """Loads in-cluster config, else the kubeconfig (`load_client_config`)."""
        from kubernetes import client

        load_client_config()
        api = (client.CoreV1Api(), client.CoordinationV1Api())
        return cls(*api, namespace, client.ApiException, owner)

    def _call(self, what: str, fn: Any, *args: Any, ok: tuple[int, ...] = (), **kw: Any) -> Any:
        """Runs `fn`; returns the HTTP status instead of raising for statuses in `ok`."""
        try:
            return fn(*args, **kw)
        except self._exc as e:
            status = int(getattr(e, "status", 0) or 0)
            if status in ok:
                return status
            raise StoreUnavailable(f"{what}: HTTP {status} {getattr(e, 'reason', '')}") from e
        except Exception as e:  # urllib3 connection errors and the like
            raise StoreUnavailable(f"{what}: {e}") from e

    def get_config_map(self, name: str) -> tuple[dict[str, str], str, dict[str, str]] | None:
        """See `KubernetesApi`."""
        cm = self._call(
            "read configmap", self._core.read_namespaced_config_map, name, self._ns, ok=(404,)
        )
        if cm == 404:
            return None
        annotations = dict(getattr(cm.metadata, "annotations", None) or {})
        return dict(cm.data or {}), str(cm.metadata.resource_version), annotations

    def create_config_map(
        self, name: str, data: dict[str, str], labels: dict[str, str], annotations: dict[str, str]
    ) -> bool:
        """See `KubernetesApi`."""
        metadata = {"name": name, "labels": labels, "annotations": annotations}
        body = {"metadata": metadata, "data": data}
        result = self._call(
            "create configmap",
            self._core.create_namespaced_config_map,
            self._ns,
            body,
            ok=(409,),
        )
        return bool(result != 409)

    def replace_config_map(
        self,
        name: str,
        data: dict[str, str],
        resource_version: str,
        labels: dict[str, str],
        annotations: dict[str, str],
    ) -> bool:
        """See `KubernetesApi`."""
        metadata = {
            "name": name,
            "resourceVersion": resource_version,
            "labels": labels,
            "annotations": annotations,
        }
        body = {"metadata": metadata, "data": data}
        result = self._call(
            "replace configmap",
            self._core.replace_namespaced_config_map,
            name,
            self._ns,
            body,
            ok=(404, 409),
        )
        return result not in (404, 409)

    def list_leases(self, label_selector: str) -> list[dict[str, Any]]:
        """See `KubernetesApi`."""
        leases = self._call(
            "list leases",
            self._coord.list_namespaced_lease,
            self._ns,
            label_selector=label_selector,
        )
        return [_lease_dict(lease) for lease in leases.items]

    def read_lease(self, name: str) -> dict[str, Any] | None:
        """See `KubernetesApi` (a list by name: the trainer's Role may list, not get)."""
        leases = self._call(
            "read lease",
            self._coord.list_namespaced_lease,
            self._ns,
            field_selector=f"metadata.name={name}",
        )
        return next((_lease_dict(lease) for lease in leases.items), None)

    def renew_lease(
        self,
        name: str,
        holder: str,
        renew_time: str,
        annotations: dict[str, str],
        labels: dict[str, str],
    ) -> None:
        """See `KubernetesApi`."""
        metadata: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
        body = {
            "metadata": metadata,
            "spec": {"holderIdentity": holder, "renewTime": renew_time, "leaseDurationSeconds": 15},
        }
        patched = self._call(
            "renew lease", self._coord.patch_namespaced_lease, name, self._ns, body, ok=(404,)
        )
        if patched == 404:
            if self._owner is not None:
                metadata["ownerReferences"] = [self._owner]
            self._call("create lease", self._coord.create_namespaced_lease, self._ns, body)

    def delete_lease(self, name: str) -> None:
        """See `KubernetesApi`."""
        self._call("delete lease", self._coord.delete_namespaced_lease, name, self._ns, ok=(404,))

    def watch_leases(
        self, label_selector: str, timeout_seconds: int
    ) -> Iterator[tuple[str, str, str]]:
        """See `KubernetesApi` (the client's `kubernetes.watch.Watch`)."""
        for obj in self._stream(
            "watch leases",
            self._coord.list_namespaced_lease,
            label_selector=label_selector,
            timeout_seconds=timeout_seconds,
        ):
            kind, lease = obj
            yield kind, str(lease.metadata.name), str(lease.spec.holder_identity or "")

    def watch_config_map(self, name: str, timeout_seconds: int) -> Iterator[tuple[str, str]]:
        """See `KubernetesApi`."""
        for kind, cm in self._stream(
            "watch configmap",
            self._core.list_namespaced_config_map,
            field_selector=f"metadata.name={name}",
            timeout_seconds=timeout_seconds,
        ):
            yield kind, data_digest(cm.data or {})

    def _stream(self, what: str, list_fn: Any, **kw: Any) -> Iterator[tuple[str, Any]]:
        """(event type, object) of one watch stream; errors as `StoreUnavailable`."""
        from kubernetes import watch

        stream = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in stream.stream(list_fn, self._ns, **kw):  # type: ignore[no-untyped-call]
                if event.get("type") == "ERROR":  # e.g. 410 Gone: re-open from now
                    raise StoreUnavailable(f"{what}: {event.get('raw_object')}")
                yield str(event["type"]), event["object"]
        except StoreUnavailable:
            raise
        except self._exc as e:
            status = int(getattr(e, "status", 0) or 0)
            error = WatchForbidden if status == 403 else StoreUnavailable
            raise error(f"{what}: HTTP {status} {getattr(e, 'reason', '')}") from e
        except Exception as e:  # urllib3 connection errors and the like
            raise StoreUnavailable(f"{what}: {e}") from e
        finally:
            stream.stop()  # type: ignore[no-untyped-call]


def _lease_dict(lease: Any) -> dict[str, Any]:
    """A Lease of the client as `KubernetesApi.list_leases` gives it."""
    renew = lease.spec.renew_time
    return {
        "name": lease.metadata.name,
        "holder": lease.spec.holder_identity,
        "renew_time": micro_time(renew) if isinstance(renew, datetime) else renew,
        "annotations": dict(lease.metadata.annotations or {}),
    }
