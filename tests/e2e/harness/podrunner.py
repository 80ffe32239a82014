"""A stand-in kubelet for e2e tests: runs pods' container commands as local processes.

The loopback cluster has no nodes and no kubelet. `PodRunner` watches the pods of one namespace
and, for each new pod, gives it its own loopback address (a distinct 127.a.b.c, so every pod
can listen on the same container port, as in a real cluster), starts its first container's
`command + args` as a local process with the pod's environment (literal values, `$(VAR)`
expansion and the common `fieldRef`s, as the kubelet does), and reports it through the real
`pods/status` subresource: `Running`, `podIP(s)`, `startTime`, conditions, container status;
`Ready` once the readiness probe (or the first container port) answers. When the pod is deleted
the process is stopped. Pods that run from EDL's images run on the kubelet nodes
(`harness/kubelet_node.py`), not here.

Two modes of placement. Without `nodes` (the default) the runner runs every pod of its
namespace and leaves them unbound (no `nodeName`), so a ReplicaSet scale-down deletes them
at once; no scheduler may run then. With `nodes` it is the kubelet of those Node objects
(`harness/nodes.py`): it registers them with their allocatable, the real kube-scheduler
binds pods to them, and it runs only the pods bound to its nodes (a Pending pod waits for
the scheduler, as on a real cluster).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import re
import socket
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import requests
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness.nodes import FakeNodes, NodeSpec
from tests.e2e.harness.processes import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[3]
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class LoopbackAddressPool:
    """Hands out distinct 127.x.y.z addresses from one random /24 (never 127.0.0.0/16)."""

    def __init__(self, seed: int | None = None) -> None:
        rnd = random.Random(seed)
        self.network = ipaddress.ip_network(
            f"127.{rnd.randint(100, 250)}.{rnd.randint(0, 255)}.0/24"
        )
        self._free = [str(h) for h in list(self.network.hosts())[1:]]
        self._lock = threading.Lock()

    def take(self, port: int | None) -> str:
        """An address nobody in this process holds, where `port` is free to bind."""
        with self._lock:
            for _ in range(len(self._free)):
                ip = self._free.pop(0)
                if port is None or _bindable(ip, port):
                    return ip
                self._free.append(ip)
        raise RuntimeError(f"no free loopback address in {self.network}")

    def give_back(self, ip: str) -> None:
        with self._lock:
            if ip not in self._free:
                self._free.append(ip)


def _bindable(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined names are replaced, `$$` escapes a `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(sub, text)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _field_ref(pod: Any, path: str, pod_ip: str) -> str:
    meta = pod.metadata
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
        "spec.nodeName": pod.spec.node_name or "",
        "spec.serviceAccountName": pod.spec.service_account_name or "",
    }
    if path in simple:
        return str(simple[path])
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        source = (meta.labels if m.group(1) == "labels" else meta.annotations) or {}
        return str(source.get(m.group(2), ""))
    raise ValueError(f"fieldRef {path!r} is not supported by the e2e pod runner")


class StartFailure(Exception):
    """The container cannot be started (its image is missing, say): shown as the kubelet shows
    it, a `waiting` container status with this reason and message, and retried on the pod's
    next event."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class PodProcesses(Protocol):
    """How a pod's container becomes a process: a local command or a container image."""

    def process(
        self, name: str, pod: Any, container: Any, env: dict[str, str], log: Path
    ) -> ManagedProcess:
        """The (not yet started) process for `container`; raises StartFailure if it cannot be."""
        ...


class LocalProcesses:
    """Runs the container's `command + args` as a local process (the image is not used)."""

    def process(
        self, name: str, pod: Any, container: Any, env: dict[str, str], log: Path
    ) -> ManagedProcess:
        c = container
        argv = [expand(a, env) for a in [*(c.command or []), *(c.args or [])]]
        if not argv:
            raise ValueError("container has no command: local processes cannot run images")
        if argv[0] == "python":
            argv[0] = sys.executable
        cwd = Path(c.working_dir) if c.working_dir else REPO_ROOT
        return ManagedProcess(name, argv, log, env=env, cwd=cwd)


@dataclass
class _RunningPod:
    uid: str
    namespace: str
    name: str
    ip: str
    container: str
    process: ManagedProcess
    probe: tuple[str, int, str] | None  # (kind, port, http path)
    started_at: str
    image: str
    ready: bool = False
    restarts: int = 0
    gave_up: bool = False
    next_restart: float = 0.0
    stopping: bool = False
    """Being stopped for a deletion: not restarted, still listed until its process is gone."""


@dataclass
class PodRunnerSettings:
    """What the runner watches and how it starts processes."""

    namespace: str
    """The only namespace watched."""
    log_dir: Path
    """One `<namespace>_<pod>.log` per pod process."""
    label_selector: str = ""
    """Only pods matching this selector are run ('' = every pod of the namespace)."""
    base_env: dict[str, str] = field(default_factory=dict)
    """Environment every process gets before the pod's own `env` (PATH, HOME, ...)."""
    ready_timeout_s: float = 30.0
    """A pod whose probe has not passed by then is reported not ready (and logged)."""
    max_restarts: int = 3
    """A container that exits is restarted (restartPolicy Always) at most this often."""
    watch_timeout_s: int = 3
    """Server-side watch timeout; bounds how long `stop()` waits for the watch thread."""
    nodes: tuple[NodeSpec, ...] = ()
    """Node objects to be the kubelet of (empty: run every pod, unbound)."""
    processes: PodProcesses = field(default_factory=LocalProcesses)
    """How each pod's container runs (local processes)."""


class PodRunner:
    """Runs the pods of one namespace as local processes; `start()` / `stop()`."""

    def __init__(
        self,
        api: client.ApiClient,
        settings: PodRunnerSettings,
        addresses: LoopbackAddressPool,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.settings = settings
        self.addresses = addresses
        self._pods: dict[str, _RunningPod] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.events: list[str] = []
        self.nodes = FakeNodes(self.core, settings.nodes) if settings.nodes else None

    # ---- public ----------------------------------------------------------------------------

    def start(self) -> None:
        if self.nodes is not None:
            self.nodes.register()
        for target, name in ((self._watch_loop, "watch"), (self._supervise_loop, "supervise")):
            t = threading.Thread(target=target, name=f"podrunner-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Stops watching and kills every process it started; bounded by the watch timeout."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.settings.watch_timeout_s + 10)
        with self._lock:
            pods = list(self._pods.values())
            self._pods.clear()
        for p in pods:
            p.process.stop(grace_s=5)
            self.addresses.give_back(p.ip)
        if self.nodes is not None:
            self.nodes.remove()

    def running(self) -> dict[str, str]:
        """Pod name -> loopback address, for pods whose process runs now."""
        with self._lock:
            return {p.name: p.ip for p in self._pods.values() if p.process.alive()}

    def log_tails(self, lines: int = 15) -> str:
        with self._lock:
            pods = list(self._pods.values())
        parts = [f"----- pod {p.name} ({p.ip}) -----\n{p.process.tail(lines)}" for p in pods]
        if self.errors:
            parts.append("----- pod runner errors -----\n" + "\n".join(self.errors[-20:]))
        return "\n".join(parts)

    # ---- watch -----------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        s = self.settings
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    listing = self.core.list_namespaced_pod(
                        s.namespace, label_selector=s.label_selector, _request_timeout=10
                    )
                    for pod in listing.items:
                        self._handle("ADDED", pod)
                    resource_version = listing.metadata.resource_version or ""
                w = watch.Watch()
                for ev in w.stream(
                    self.core.list_namespaced_pod,
                    s.namespace,
                    label_selector=s.label_selector,
                    resource_version=resource_version,
                    timeout_seconds=s.watch_timeout_s,
                    _request_timeout=s.watch_timeout_s + 10,
                ):
                    if ev["type"] == "ERROR":
                        resource_version = ""  # expired: relist
                        break
                    pod = ev["object"]
                    resource_version = pod.metadata.resource_version
                    self._handle(ev["type"], pod)
                    if self._stop.is_set():
                        w.stop()
                        break
            except ApiException as e:
                if e.status == 410:
                    resource_version = ""
                else:
                    self._error(f"watch: {e.status} {e.reason}")
                    self._stop.wait(1.0)
            except Exception as e:  # keep the kubelet stand-in alive; report at teardown
                self._error(f"watch: {e!r}")
                self._stop.wait(1.0)

    def _handle(self, kind: str, pod: Any) -> None:
        uid = pod.metadata.uid
        if kind == "DELETED" or pod.metadata.deletion_timestamp is not None:
            self._kill(uid, pod)
            return
        with self._lock:
            known = uid in self._pods
        if not known and pod.status.phase in (None, "Pending") and self._runs_here(pod):
            try:
                self._launch(pod)
            except Exception as e:
                self._error(f"launch {pod.metadata.name}: {e!r}\n{traceback.format_exc()}")

    def _runs_here(self, pod: Any) -> bool:
        """Without nodes: every pod. With nodes: pods bound to one of them."""
        return self.nodes is None or (pod.spec.node_name or "") in self.nodes.names

    # ---- pod lifecycle ---------------------------------------------------------------------

    def _launch(self, pod: Any) -> None:
        s = self.settings
        c = pod.spec.containers[0]
        ports = [p.container_port for p in (c.ports or [])]
        probe = self._probe_of(c, ports)
        ip = self.addresses.take(ports[0] if ports else None)
        env = dict(s.base_env)
        env["HOSTNAME"] = pod.metadata.name
        for var in c.env or []:
            if var.value_from is not None:
                if var.value_from.field_ref is None:
                    raise ValueError(f"env {var.name}: only value and fieldRef are supported")
                env[var.name] = _field_ref(pod, var.value_from.field_ref.field_path, ip)
            else:
                env[var.name] = expand(var.value or "", env)
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        log = s.log_dir / f"{pod.metadata.namespace}_{pod.metadata.name}.log"
        try:
            process = s.processes.process(name, pod, c, env, log)
        except StartFailure as e:
            self.addresses.give_back(ip)
            self._patch_waiting(pod, c, e)
            return
        running = _RunningPod(
            uid=pod.metadata.uid,
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            ip=ip,
            container=c.name,
            process=process,
            probe=probe,
            started_at=_now(),
            image=c.image or "edl-e2e.invalid/local-process",
        )
        process.start()
        with self._lock:  # only now, so the supervisor never sees a not-yet-started process
            self._pods[running.uid] = running
        self.events.append(f"{_now()} started {name} at {ip} pid={process.pid}: {process.argv}")
        self._patch_status(running, ready=False)
        if probe is None:
            running.ready = True
            self._patch_status(running, ready=True)

    @staticmethod
    def _probe_of(c: Any, ports: list[int]) -> tuple[str, int, str] | None:
        rp = c.readiness_probe
        named = {p.name: p.container_port for p in (c.ports or []) if p.name}
        if rp is not None and rp.http_get is not None:
            scheme = "https" if (rp.http_get.scheme or "").upper() == "HTTPS" else "http"
            return (
                scheme,
                int(named.get(rp.http_get.port, rp.http_get.port)),
                rp.http_get.path or "/",
            )
        if rp is not None and rp.tcp_socket is not None:
            return ("tcp", int(named.get(rp.tcp_socket.port, rp.tcp_socket.port)), "")
        if ports:
            return ("tcp", ports[0], "")
        return None

    def _kill(self, uid: str, pod: Any) -> None:
        with self._lock:
            running = self._pods.get(uid)
            if running is not None:
                running.stopping = True
        if running is not None:
            # Listed (by `running()`) until the process is gone, then forgotten.
            running.process.stop(grace_s=5)
            with self._lock:
                self._pods.pop(uid, None)
            self.addresses.give_back(running.ip)
            self.events.append(f"{_now()} stopped {running.namespace}/{running.name}")
        if pod.metadata.deletion_timestamp is not None:
            # Like the kubelet confirming a graceful deletion: remove the object for good.
            try:
                self.core.delete_namespaced_pod(
                    pod.metadata.name,
                    pod.metadata.namespace,
                    grace_period_seconds=0,
                    _request_timeout=10,
                )
            except ApiException as e:
                if e.status != 404:
                    self._error(f"delete {pod.metadata.name}: {e.status} {e.reason}")

    def _supervise_loop(self) -> None:
        """Probes readiness, notices exits, restarts (bounded); every 0.25 s."""
        while not self._stop.wait(0.25):
            with self._lock:
                pods = list(self._pods.values())
            for p in pods:
                try:
                    self._supervise(p)
                except ApiException as e:
                    if e.status != 404:
                        self._error(f"supervise {p.name}: {e.status} {e.reason}")
                except Exception as e:
                    self._error(f"supervise {p.name}: {e!r}")

    def _supervise(self, p: _RunningPod) -> None:
        if p.stopping:
            return
        if not p.process.alive():
            if p.gave_up:
                return
            if p.ready:
                p.ready = False
                self._patch_status(p, ready=False, exit_code=p.process.returncode())
                self.events.append(f"{_now()} {p.name} exited rc={p.process.returncode()}")
                p.next_restart = time.monotonic() + 1.0
            if p.restarts >= self.settings.max_restarts:
                p.gave_up = True
                self._error(
                    f"{p.name}: exited {p.restarts + 1} times; not restarting\n{p.process.tail(20)}"
                )
                return
            if time.monotonic() >= p.next_restart:
                p.restarts += 1
                p.process.start()
                p.next_restart = time.monotonic() + 2.0 * p.restarts
            return
        if p.ready or p.probe is None:
            return
        if self._probe_passes(p):
            p.ready = True
            self._patch_status(p, ready=True)
            self.events.append(f"{_now()} {p.name} ready")

    @staticmethod
    def _probe_passes(p: _RunningPod) -> bool:
        assert p.probe is not None
        kind, port, path = p.probe
        try:
            if kind in ("http", "https"):  # like the kubelet: HTTPS without verifying the cert
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = requests.get(f"{kind}://{p.ip}:{port}{path}", timeout=1, verify=False)
                return 200 <= r.status_code < 400
            with socket.create_connection((p.ip, port), timeout=1):
                return True
        except (OSError, requests.RequestException):
            return False

    def _patch_status(self, p: _RunningPod, *, ready: bool, exit_code: int | None = None) -> None:
        now = _now()
        flag = "True" if ready else "False"
        state: dict[str, Any]
        if exit_code is None:
            state = {"running": {"startedAt": p.started_at}}
        else:
            state = {"terminated": {"exitCode": exit_code, "finishedAt": now}}
        status: dict[str, Any] = {
            "phase": "Running",
            "podIP": p.ip,
            "podIPs": [{"ip": p.ip}],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": p.started_at,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": p.started_at},
                {"type": "Initialized", "status": "True", "lastTransitionTime": p.started_at},
                {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                {"type": "Ready", "status": flag, "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": p.container,
                    "image": p.image,
                    "imageID": "",
                    "ready": ready,
                    "started": exit_code is None,
                    "restartCount": p.restarts,
                    "state": state,
                }
            ],
        }
        self.core.patch_namespaced_pod_status(
            p.name,
            p.namespace,
            {"status": status},
            _content_type="application/merge-patch+json",
            _request_timeout=10,
        )

    def _patch_waiting(self, pod: Any, c: Any, failure: StartFailure) -> None:
        """Pending with a waiting container, as the kubelet reports an image it cannot pull.

        Times are the pod's creation time, so a repeated failure is a no-op patch (no event).
        """
        since = pod.metadata.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        waiting = {"reason": failure.reason, "message": failure.message}
        status = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": since},
                {"type": "Ready", "status": "False", "lastTransitionTime": since},
            ],
            "containerStatuses": [
                {"name": c.name, "image": c.image or "", "imageID": "", "ready": False,
                 "started": False, "restartCount": 0, "state": {"waiting": waiting}}
            ],
        }  # fmt: skip
        self.core.patch_namespaced_pod_status(
            pod.metadata.name,
            pod.metadata.namespace,
            {"status": status},
            _content_type="application/merge-patch+json",
            _request_timeout=10,
        )

    def _error(self, message: str) -> None:
        self.errors.append(f"{_now()} {message}")
