"""Container mode of the e2e pod runner: each pod's container runs from its image with podman.

What a kubelet would do, done with `podman run` (runtime runc, `--network host`, never a
bridge network): the image must already be in local storage (nothing is pulled; a missing one
is `ErrImagePull`), `command`/`args` replace the image's ENTRYPOINT/CMD, the pod's env and the
`KUBERNETES_SERVICE_*` variables are set, the securityContext is applied (runAsUser/Group,
runAsNonRoot checked against the image's user, readOnlyRootFilesystem without a /tmp of
podman's own, allowPrivilegeEscalation, capabilities), and volumes are materialised on the
host: emptyDir, configMap, secret, downwardAPI, projected, persistentVolumeClaim (one shared
host directory per claim, as a ReadWriteMany volume), plus the ServiceAccount token
(TokenRequest bound to the pod, the cluster CA, the namespace) that the ServiceAccount
admission plugin and the kubelet would mount at /var/run/secrets/kubernetes.io/serviceaccount.
Every pod shares the host's network namespace, so its processes must listen on the pod's own
127.x address (`status.podIP`), not on 0.0.0.0.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.podrunner import StartFailure, _field_ref, expand
from tests.e2e.harness.processes import HarnessError, ManagedProcess

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
RUN_LABEL = "edl.e2e/run"


@dataclass
class ContainerSettings:
    """Where the runtime keeps its files and how containers reach kube-apiserver."""

    work_dir: Path
    """containers.conf and every pod's volumes (`volumes/<pod uid>/<volume>`)."""
    api_host: str
    """`KUBERNETES_SERVICE_HOST` (kube-apiserver's loopback address)."""
    api_port: int
    """`KUBERNETES_SERVICE_PORT`."""
    cluster_ca: Path
    """The CA of kube-apiserver's serving certificate (`ca.crt` of the token volume)."""
    run_id: str
    """Label value of every container started, so `cleanup()` removes exactly those."""
    token_ttl_s: int = 3600
    """Lifetime of the ServiceAccount tokens (not refreshed: longer than any test)."""
    runtime: str = "runc"
    """OCI runtime (crun fails on these machines: cgroups in hybrid mode)."""


@dataclass
class Mount:
    """One bind mount: host folder -> container path."""

    source: Path
    target: str
    read_only: bool


@dataclass
class RunSpec:
    """Everything `podman run` is told about one container."""

    name: str
    image: str
    entrypoint: list[str] | None
    args: list[str]
    env: dict[str, str]
    mounts: list[Mount] = field(default_factory=list)
    user: str | None = None
    read_only: bool = False
    no_new_privileges: bool = False
    cap_drop: list[str] = field(default_factory=list)
    cap_add: list[str] = field(default_factory=list)
    workdir: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def run_argv(spec: RunSpec) -> list[str]:
    """The `podman run` command line for `spec` (attached, removed on exit, host network)."""
    argv = ["podman", "run", "--rm", "--name", spec.name, "--network", "host", "--pull", "never"]
    argv += ["--stop-timeout", "5"]
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    if spec.user is not None:
        argv += ["--user", spec.user]
    if spec.read_only:  # no tmpfs of podman's own: a pod gets only the volumes it declares
        argv += ["--read-only", "--read-only-tmpfs=false"]
    if spec.no_new_privileges:
        argv += ["--security-opt", "no-new-privileges"]
    argv += [f"--cap-drop={c}" for c in spec.cap_drop] + [f"--cap-add={c}" for c in spec.cap_add]
    if spec.workdir:
        argv += ["--workdir", spec.workdir]
    for key, value in spec.env.items():
        argv += ["--env", f"{key}={value}"]
    for m in spec.mounts:
        argv += ["--volume", f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}"]
    if spec.entrypoint is not None:
        argv += ["--entrypoint", json.dumps(spec.entrypoint)]
    return [*argv, spec.image, *spec.args]


class ContainerProcess(ManagedProcess):
    """`podman run` in the foreground; stopping it also removes the container (even a stuck one)."""

    def __init__(self, name: str, spec: RunSpec, log: Path, env: dict[str, str]) -> None:
        super().__init__(name, run_argv(spec), log, env=env)
        self.container = spec.name

    def start(self) -> None:
        self._remove()  # a leftover of a killed `podman run` would block the name
        super().start()

    def stop(self, grace_s: float = 10.0) -> None:
        super().stop(grace_s)
        self._remove()

    def _remove(self) -> None:
        subprocess.run(
            ["podman", "rm", "--force", "--time", "0", "--ignore", self.container],
            env=self.env,
            capture_output=True,
            timeout=60,
            check=False,
        )


class PodmanContainers:
    """`PodProcesses` for the pod runner: pods run from their images (see the module doc)."""

    def __init__(self, core: client.CoreV1Api, settings: ContainerSettings) -> None:
        self.core = core
        self.settings = settings
        self.conf = settings.work_dir / "containers.conf"
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(containers_conf(settings.runtime))
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.conf)}

    # ---- PodProcesses ------------------------------------------------------------------------

    def process(
        self, name: str, pod: Any, container: Any, env: dict[str, str], log: Path
    ) -> ManagedProcess:
        c = container
        image_user = self._image_user(c.image)
        env = {
            **env,
            "KUBERNETES_SERVICE_HOST": self.settings.api_host,
            "KUBERNETES_SERVICE_PORT": str(self.settings.api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.settings.api_port),
        }
        security = _merged_security(pod, c)
        spec = RunSpec(
            name=f"edl-e2e-{pod.metadata.uid}",
            image=c.image,
            entrypoint=[expand(a, env) for a in c.command] if c.command else None,
            args=[expand(a, env) for a in c.args or []],
            env=env,
            mounts=list(self._mounts(pod, c)),
            user=_user(security, image_user, pod, c),
            read_only=bool(security.get("read_only_root_filesystem")),
            no_new_privileges=security.get("allow_privilege_escalation") is False,
            cap_drop=list(security.get("drop") or []),
            cap_add=list(security.get("add") or []),
            workdir=c.working_dir,
            labels={RUN_LABEL: self.settings.run_id, "edl.e2e/pod": pod.metadata.name},
        )
        return ContainerProcess(name, spec, log, self.env)

    def cleanup(self) -> None:
        """Removes every container this run started (also those of a crashed test)."""
        done = self._podman("ps", "-aq", "--filter", f"label={RUN_LABEL}={self.settings.run_id}")
        ids = done.stdout.split()
        if ids:
            self._podman("rm", "--force", "--time", "0", *ids)

    def inspect(self, pod_uid: str) -> dict[str, Any]:
        """`podman inspect` of a pod's container (what a test can check about how it runs)."""
        done = self._podman("inspect", f"edl-e2e-{pod_uid}")
        if done.returncode != 0:
            raise HarnessError(f"podman inspect: {done.stderr.strip()}")
        return dict(json.loads(done.stdout)[0])

    # ---- image and user ----------------------------------------------------------------------

    def _image_user(self, image: str | None) -> str:
        if not image:
            raise StartFailure("InvalidImageName", "the container names no image")
        done = self._podman("image", "inspect", "--format", "{{.Config.User}}", image)
        if done.returncode != 0:
            raise StartFailure(
                "ErrImagePull",
                f'image "{image}" is not on this node, and the e2e node pulls from no '
                "registry (make images builds EDL's images)",
            )
        return done.stdout.strip()

    # ---- volumes -----------------------------------------------------------------------------

    def _mounts(self, pod: Any, c: Any) -> Iterator[Mount]:
        root = self.settings.work_dir / "volumes" / pod.metadata.uid
        volumes = {v.name: v for v in pod.spec.volumes or []}
        made: dict[str, Path] = {}
        for vm in c.volume_mounts or []:
            if vm.name not in volumes:
                raise StartFailure(
                    "CreateContainerConfigError", f"volumeMount {vm.name!r} names no volume"
                )
            if vm.name not in made:
                made[vm.name] = self._materialise(pod, volumes[vm.name], root / vm.name)
            source = made[vm.name] / vm.sub_path if vm.sub_path else made[vm.name]
            yield Mount(
                source, vm.mount_path, bool(vm.read_only) or _is_read_only(volumes[vm.name])
            )
        mounted = {vm.mount_path for vm in c.volume_mounts or []}
        if pod.spec.automount_service_account_token is not False and SA_MOUNT not in mounted:
            yield Mount(self._service_account(pod, root / "kube-api-access"), SA_MOUNT, True)

    def _materialise(self, pod: Any, volume: Any, path: Path) -> Path:
        ns = pod.metadata.namespace
        if volume.empty_dir is not None:
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)  # as the kubelet makes it: any runAsUser may write
        elif volume.config_map is not None:
            data = self._config_map(ns, volume.config_map.name, volume.config_map.optional)
            _write_files(path, data, volume.config_map.items)
        elif volume.secret is not None:
            data = self._secret(ns, volume.secret.secret_name, volume.secret.optional)
            _write_files(path, data, volume.secret.items)
        elif volume.downward_api is not None:
            _write_files(path, self._downward(pod, volume.downward_api.items), None)
        elif volume.projected is not None:
            for source in volume.projected.sources or []:
                self._project(pod, source, path)
        elif volume.persistent_volume_claim is not None:
            path = self._claim(ns, volume.persistent_volume_claim.claim_name)
        else:
            kind = next((k for k, v in volume.to_dict().items() if v and k != "name"), "unknown")
            raise StartFailure(
                "CreateContainerConfigError",
                f"volume {volume.name!r}: {kind} is not supported by the e2e container runner",
            )
        return path

    def _project(self, pod: Any, source: Any, path: Path) -> None:
        ns = pod.metadata.namespace
        if source.config_map is not None:
            cm = source.config_map
            _write_files(path, self._config_map(ns, cm.name, cm.optional), cm.items)
        elif source.secret is not None:
            sec = source.secret
            _write_files(path, self._secret(ns, sec.name, sec.optional), sec.items)
        elif source.downward_api is not None:
            _write_files(path, self._downward(pod, source.downward_api.items), None)
        elif source.service_account_token is not None:
            tok = source.service_account_token
            token = self._token(pod, tok.audience, tok.expiration_seconds)
            _write_files(path, {tok.path: token.encode()}, None)

    def _service_account(self, pod: Any, path: Path) -> Path:
        files = {
            "token": self._token(pod, None, None).encode(),
            "ca.crt": self.settings.cluster_ca.read_bytes(),
            "namespace": pod.metadata.namespace.encode(),
        }
        _write_files(path, files, None)
        return path

    def _token(self, pod: Any, audience: str | None, ttl: int | None) -> str:
        sa = pod.spec.service_account_name or "default"
        body = {
            "spec": {
                "audiences": [audience] if audience else None,
                "expirationSeconds": ttl or self.settings.token_ttl_s,
                "boundObjectRef": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "name": pod.metadata.name,
                    "uid": pod.metadata.uid,
                },
            }
        }
        try:
            answer = self.core.create_namespaced_service_account_token(
                sa, pod.metadata.namespace, as_body(body), _request_timeout=10
            )
        except ApiException as e:
            raise StartFailure(
                "CreateContainerConfigError",
                f"serviceaccount {pod.metadata.namespace}/{sa}: token request failed: "
                f"{e.status} {e.reason}",
            ) from e
        return str(answer.status.token)

    def _config_map(self, ns: str, name: str, optional: bool | None) -> dict[str, bytes]:
        try:
            cm = self.core.read_namespaced_config_map(name, ns, _request_timeout=10)
        except ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise StartFailure(
                "CreateContainerConfigError", f'configmap "{name}" not found ({e.status})'
            ) from e
        data = {k: v.encode() for k, v in (cm.data or {}).items()}
        data |= {k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()}
        return data

    def _claim(self, ns: str, name: str) -> Path:
        """A PersistentVolumeClaim as one host directory shared by every pod that mounts it.

        Like a ReadWriteMany volume: the same files in every pod, kept when pods go. No
        provisioner or binding is modelled (the claim need not be Bound); it must exist.
        """
        try:
            self.core.read_namespaced_persistent_volume_claim(name, ns, _request_timeout=10)
        except ApiException as e:
            raise StartFailure(
                "CreateContainerConfigError",
                f'persistentvolumeclaim "{name}" not found ({e.status})',
            ) from e
        path = self.settings.work_dir / "claims" / ns / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # any runAsUser may write, as on a shared export
        return path

    def _secret(self, ns: str, name: str, optional: bool | None) -> dict[str, bytes]:
        try:
            secret = self.core.read_namespaced_secret(name, ns, _request_timeout=10)
        except ApiException as e:
            if e.status == 404 and optional:
                return {}
            raise StartFailure(
                "CreateContainerConfigError", f'secret "{name}" not found ({e.status})'
            ) from e
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    @staticmethod
    def _downward(pod: Any, items: Any) -> dict[str, bytes]:
        out = {}
        for item in items or []:
            if item.field_ref is None:
                raise StartFailure(
                    "CreateContainerConfigError", "downwardAPI: only fieldRef items are supported"
                )
            out[item.path] = _field_ref(pod, item.field_ref.field_path, "").encode()
        return out

    def _podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=60, check=False
        )


def containers_conf(runtime: str) -> str:
    """runc, cgroupfs, file events, and ulimits this sandbox allows (podman's default nofile
    of 1048576 is above its hard limit: "setrlimit RLIMIT_NOFILE: Operation not permitted")."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    return (
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        f'runtime = "{runtime}"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )


def _merged_security(pod: Any, c: Any) -> dict[str, Any]:
    """The container's securityContext over the pod's (user, group, non-root), flattened."""
    merged: dict[str, Any] = {}
    psc, csc = pod.spec.security_context, c.security_context
    for sc in (psc, csc):
        if sc is None:
            continue
        for key in ("run_as_user", "run_as_group", "run_as_non_root"):
            if getattr(sc, key, None) is not None:
                merged[key] = getattr(sc, key)
    if csc is not None:
        merged["read_only_root_filesystem"] = csc.read_only_root_filesystem
        merged["allow_privilege_escalation"] = csc.allow_privilege_escalation
        if csc.capabilities is not None:
            merged["drop"] = csc.capabilities.drop
            merged["add"] = csc.capabilities.add
    return merged


def _user(security: dict[str, Any], image_user: str, pod: Any, c: Any) -> str | None:
    """`--user` for podman; refuses root under runAsNonRoot as the kubelet does."""
    uid, gid = security.get("run_as_user"), security.get("run_as_group")
    if security.get("run_as_non_root"):
        name = image_user.split(":")[0]
        effective = str(uid) if uid is not None else name
        if effective in ("", "0", "root"):
            raise StartFailure(
                "CreateContainerConfigError",
                "container has runAsNonRoot and image will run as root "
                f"(pod: {pod.metadata.name!r}, container: {c.name})",
            )
        if uid is None and not name.isdigit():
            raise StartFailure(
                "CreateContainerConfigError",
                f"container has runAsNonRoot and image has non-numeric user ({name}), "
                "cannot verify user is non-root",
            )
    if uid is None and gid is None:
        return None
    user = str(uid) if uid is not None else image_user.split(":")[0] or "0"
    return f"{user}:{gid}" if gid is not None else user


def _is_read_only(volume: Any) -> bool:
    """configMap, secret, downwardAPI and projected volumes are read-only in a real pod."""
    return any(
        getattr(volume, k) is not None
        for k in ("config_map", "secret", "downward_api", "projected")
    )


def _write_files(path: Path, data: dict[str, bytes], items: Any) -> None:
    """Writes keys (or the listed `items`, key -> path) as files, readable by any user."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    chosen = {i.key: i.path for i in items} if items else {k: k for k in data}
    for key, rel in chosen.items():
        if key not in data:
            raise StartFailure("CreateContainerConfigError", f"key {key!r} not found")
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[key])
        target.chmod(0o644)
