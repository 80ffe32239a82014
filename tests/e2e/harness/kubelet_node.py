"""A real node for the loopback control plane: containerd v2 (CRI on) and the kubelet.

The binaries come from `tests/e2e/node/build.sh` (kubelet at the control plane's version and
containerd with its runc shim and `ctr`, built from the Go module proxy and cached outside the
clone); runc is the system's. Everything the node keeps lives under `work_dir`: containerd's
root, state and socket, the kubelet's `--root-dir`, its configuration, certificates and logs;
its pods' cgroups live under a cgroup root of their own (`/edl-e2e-node-<id>`), so two nodes on
one machine never meet. `stop()` stops the kubelet, then every container containerd still
runs (through `ctr`), then containerd and the shims it started (by PID), unmounts what they
left mounted under `work_dir` and removes the cgroups.

How this machine needs it (docs/development.md, "The e2e node"):

* cgroup v1 (hybrid): `failCgroupV1: false`, `cgroupDriver: cgroupfs` (no systemd here), and
  containerd's runc runtime with `SystemdCgroup = false`;
* swap may be on: `failSwapOn: false`;
* no CNI: every pod uses `hostNetwork: true`. containerd reports its runtime network ready only
  once a CNI network configuration is loaded, and the kubelet keeps a node `Ready=False` until
  then, so the node's CNI folder holds one configuration whose plugin does not exist
  (`edl-e2e-no-pod-network`): it is never called for a host-network pod, and a pod that asks
  for a network of its own fails with that plugin's name in its error;
* the sandbox ("pause") image is built locally (a static Go `pause` from build.sh, `FROM
  scratch`, podman) and imported like EDL's images: nothing is pulled;
* several nodes share one machine, each on a loopback address of its own (`node_ip`, e.g.
  127.163.20.2): a host-network pod's IP is its node's InternalIP, so two pods of one job on
  two nodes listen on distinct addresses. The kubelet refuses a loopback `--node-ip`, so it
  runs with `--cloud-provider=external` and the harness does what a cloud controller manager
  does: it sets the Node's addresses (InternalIP and Hostname = `node_ip`; the kubelet keeps
  addresses it finds set) and removes the `node.cloudprovider.kubernetes.io/uninitialized`
  taint. The kubelet listens on `node_ip` only; kube-apiserver reaches it there (its first
  address type, Hostname, is the IP) with its kubelet client certificate
  (`ClusterPKI.kubelet_client`), which is all the kubelet accepts;
* each node is named `settings.name` (`edl-node-<n>`) and signs in as `system:node:<name>`
  (group `system:nodes`), with the built-in ClusterRole `system:node` bound to it (the control
  plane authorizes with RBAC only); its pods' logs go under its own `work_dir` (`podLogsDir`);
* the disk may be fuller than the kubelet's default eviction thresholds: they are lowered to
  1 %, and image garbage collection is off;
* every node reports the whole machine's CPUs as its capacity; `allocatable_cpu` (e.g. "1")
  makes the kubelet reserve the rest (`systemReserved`, computed from this machine's CPU count
  at start and checked against the Node's `status.allocatable` once it is Ready), so several
  nodes on one machine can stand for a cluster of small nodes (`make demo-cluster`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from edl_common.quantity import QuantityError, parse_quantity
from tests.e2e.harness.certs import issue_client_cert, issue_serving_cert
from tests.e2e.harness.controlplane import REPO_ROOT, ControlPlane
from tests.e2e.harness.processes import HarnessError, ManagedProcess, built_folder, free_port
from tests.support.waiting import WaitTimeout, wait_for

BUILD_SCRIPT = REPO_ROOT / "tests" / "e2e" / "node" / "build.sh"
NODE_NAME = "edl-node-1"
"""The first node's name (`KubeletNodeSettings.name`'s default)."""
K8S_NAMESPACE = "k8s.io"
"""containerd's namespace for what the CRI runs (and where imported images must be)."""
PAUSE_IMAGE = "localhost/edl-e2e-pause:1"
NO_POD_NETWORK = "edl-e2e-no-pod-network"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
_SOCKET_MAX = 100
"""A unix socket's path must fit in 108 bytes."""


def ensure_node_binaries(timeout_s: float = 3600.0) -> Path:
    """Runs build.sh (instant when cached) under a lock and returns the bin directory.

    Raises:
        HarnessError: the build failed; the message holds its last output lines.
    """
    names = ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "pause")
    return built_folder(BUILD_SCRIPT, "node.lock", "e2e node build", timeout_s, names)


@dataclass
class KubeletNodeSettings:
    """Where the node's binaries are, where it keeps its state, how long a start may take."""

    bin_dir: Path
    """build.sh's folder: kubelet, containerd, containerd-shim-runc-v2, ctr, pause."""
    work_dir: Path
    """Scratch folder: containerd's and the kubelet's state, configuration and logs."""
    name: str = NODE_NAME
    """The Node's name (`--hostname-override`)."""
    node_ip: str = "127.0.0.1"
    """The node's loopback address: its InternalIP, every host-network pod's IP, where the
    kubelet listens. Distinct per node (`LoopbackAddressPool`)."""
    runc: str = "/usr/sbin/runc"
    ready_timeout_s: float = 180.0
    """Bound on each component's wait (containerd's socket, the Node's `Ready=True`)."""
    node_labels: dict[str, str] = field(default_factory=dict)
    allocatable_cpu: str | None = None
    """The Node's allocatable CPU (a Quantity, e.g. "1"): the kubelet reserves the rest of this
    machine's CPUs (`systemReserved`). None: the whole machine, as the kubelet reports it."""


def reserved_cpu(allocatable: str, machine_cpus: int) -> str:
    """The `systemReserved` CPU (millicores) that leaves `allocatable` of `machine_cpus`.

    Raises:
        HarnessError: `allocatable` is not a positive CPU quantity the machine has.
    """
    try:
        want = parse_quantity(allocatable) * 1000
    except QuantityError as e:
        raise HarnessError(f"allocatable_cpu {allocatable!r}: {e}") from e
    if want <= 0 or want != int(want) or want > machine_cpus * 1000:
        raise HarnessError(
            f"allocatable_cpu {allocatable!r}: between 1m and this machine's {machine_cpus} CPUs"
        )
    return f"{machine_cpus * 1000 - int(want)}m"


class KubeletNode:
    """Starts containerd and the kubelet, registered as Node `settings.name`; stops both."""

    def __init__(self, cp: ControlPlane, settings: KubeletNodeSettings) -> None:
        self.cp = cp
        self.settings = settings
        self.work = settings.work_dir
        self.name = settings.name
        self.ip = settings.node_ip
        self.log_dir = self.work / "logs"
        self.containerd: ManagedProcess | None = None
        self.kubelet: ManagedProcess | None = None
        self.cgroup_root = f"/edl-e2e-node-{uuid.uuid4().hex[:8]}"
        self.socket = self.work / "containerd" / "containerd.sock"
        if len(str(self.socket)) > _SOCKET_MAX:  # a short folder of its own instead
            short = Path(tempfile.mkdtemp(prefix="edl-ctd-"))
            self.socket = short / "containerd.sock"

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """containerd (checked with `ctr version`), the pause image, then the kubelet until its
        Node is `Ready=True`.

        Raises:
            HarnessError: something did not come up; the message has its log tail.
        """
        if not os.access(self.settings.runc, os.X_OK):
            raise HarnessError(f"runc not found at {self.settings.runc} (apt-get install runc)")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._start_containerd()
        self.import_image(PAUSE_IMAGE, build=self._build_pause_image)
        self._start_kubelet()

    def stop(self) -> None:
        """Stops the kubelet, every container, containerd and its shims; unmounts what they
        left under `work_dir`, removes the node's cgroups and containerd's and the kubelet's
        state (image snapshots: GBs; the logs stay). Never raises."""
        steps = (
            lambda: self.kubelet.stop() if self.kubelet else None,
            self._remove_containers,
            lambda: self.containerd.stop() if self.containerd else None,
            self._stop_shims,
            self._unmount_leftovers,
            self._remove_cgroups,
            self._remove_state,
        )
        for step in steps:
            try:
                step()
            except Exception as e:  # teardown must reach every step
                print(f"stopping the e2e node: {e!r}")

    def log_tails(self, lines: int = 30) -> str:
        """containerd's and the kubelet's last log lines, for a failing test's report."""
        procs = (self.containerd, self.kubelet)
        return "\n".join(f"----- {p.name} ({p.log}) -----\n{p.tail(lines)}" for p in procs if p)

    # ---- images ------------------------------------------------------------------------------

    def ctr(self, *args: str, stdin: bytes | None = None, timeout_s: float = 120.0) -> str:
        """`ctr -a <socket> -n k8s.io ...`; raises HarnessError on a failure."""
        argv = [str(self.settings.bin_dir / "ctr"), "-a", str(self.socket), "-n", K8S_NAMESPACE]
        try:
            done = subprocess.run(
                [*argv, *args], input=stdin, capture_output=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise HarnessError(f"ctr {' '.join(args)} ran past {timeout_s:.0f} s") from e
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()
            raise HarnessError(f"ctr {' '.join(args)} failed rc={done.returncode}: {err}")
        return done.stdout.decode(errors="replace")

    def images(self) -> set[str]:
        """The image references containerd's CRI namespace holds."""
        return set(self.ctr("images", "ls", "-q").split())

    def import_image(
        self, ref: str, *, build: Any = None, archive: Path | None = None, timeout_s: float = 600.0
    ) -> None:
        """`podman save <ref> | ctr -n k8s.io images import` (skipped when already there).

        `build`, when given, is called first if podman does not have `ref`; `archive`, when
        given, is a `save_image` of `ref` (one save for several nodes).

        Raises:
            HarnessError: podman or ctr failed (their message), or ran past `timeout_s`.
        """
        if ref in self.images():
            return
        if build is not None and not _podman_has(ref):
            build()
        with tempfile.TemporaryDirectory() as scratch:
            path = archive or save_image(ref, Path(scratch) / "image.tar", timeout_s)
            # the layers go once unpacked: a node keeps the snapshot only (half the disk)
            argv = ["images", "import", "--local", "--discard-unpacked-layers", str(path)]
            self.ctr(*argv, timeout_s=timeout_s)
        if ref not in self.images():
            raise HarnessError(f"ctr imported {ref} but does not list it: {sorted(self.images())}")

    def _build_pause_image(self) -> None:
        with tempfile.TemporaryDirectory() as context:
            shutil.copy2(self.settings.bin_dir / "pause", Path(context) / "pause")
            (Path(context) / "Containerfile").write_text(
                'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
            )
            done = subprocess.run(
                ["podman", "build", "-q", "-t", PAUSE_IMAGE, context],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
        if done.returncode != 0:
            raise HarnessError(f"podman build {PAUSE_IMAGE} failed: {done.stderr.strip()}")

    # ---- containerd --------------------------------------------------------------------------

    def _containerd_config(self) -> dict[str, Any]:
        base = self.work / "containerd"
        cri_runtime = "io.containerd.cri.v1.runtime"
        return {
            "version": 3,
            "root": str(base / "root"),
            "state": str(base / "state"),
            "grpc": {"address": str(self.socket)},
            "ttrpc": {"address": f"{self.socket}.ttrpc"},
            "debug": {"level": "info"},
            "plugins": {
                "io.containerd.internal.v1.opt": {"path": str(base / "opt")},
                "io.containerd.grpc.v1.cri": {
                    "disable_tcp_service": True,
                    "stream_server_address": "127.0.0.1",
                    "stream_server_port": "0",
                },
                "io.containerd.cri.v1.images": {
                    "snapshotter": "overlayfs",
                    "pinned_images": {"sandbox": PAUSE_IMAGE},
                },
                cri_runtime: {
                    # this sandbox lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj
                    # (the pause container's -998), "can't get final child's PID from pipe"
                    "restrict_oom_score_adj": True,
                    "cni": {"bin_dirs": [str(base / "cni-bin")], "conf_dir": str(base / "cni")},
                    "containerd": {
                        "default_runtime_name": "runc",
                        "runtimes": {
                            "runc": {
                                "runtime_type": "io.containerd.runc.v2",
                                "options": {
                                    "BinaryName": self.settings.runc,
                                    "SystemdCgroup": False,
                                },
                            }
                        },
                    },
                },
            },
        }

    def _start_containerd(self) -> None:
        base = self.work / "containerd"
        (base / "cni").mkdir(parents=True, exist_ok=True)
        (base / "cni-bin").mkdir(parents=True, exist_ok=True)
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        no_network = {
            "cniVersion": "1.0.0",
            "name": NO_POD_NETWORK,
            "plugins": [{"type": NO_POD_NETWORK}],
        }
        (base / "cni" / "10-edl-e2e.conflist").write_text(json.dumps(no_network))
        config = base / "config.toml"
        config.write_text(tomli_w.dumps(self._containerd_config()))
        env = {**os.environ, "PATH": f"{self.settings.bin_dir}:{os.environ.get('PATH', '')}"}
        self.containerd = ManagedProcess(
            "containerd",
            [str(self.settings.bin_dir / "containerd"), f"--config={config}"],
            self.log_dir / "containerd.log",
            env=env,
        )
        self.containerd.start()
        self._wait(self.containerd, lambda: self.ctr("version", timeout_s=10), "containerd up")

    # ---- kubelet -----------------------------------------------------------------------------

    def _kubelet_config(self, port: int, healthz: int) -> dict[str, Any]:
        pki = self.cp.pki
        assert pki is not None
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "address": self.ip,
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(pki.ca.cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "tlsCertFile": str(self.work / "kubelet" / "pki" / "serving.crt"),
            "tlsPrivateKeyFile": str(self.work / "kubelet" / "pki" / "serving.key"),
            "volumePluginDir": str(self.work / "kubelet" / "volume-plugins"),
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
            "resolvConf": "/etc/resolv.conf",
            "registerNode": True,
            "podLogsDir": str(self.work / "pod-logs"),
            **self._reserved(),
        }

    def _reserved(self) -> dict[str, Any]:
        allocatable = self.settings.allocatable_cpu
        if allocatable is None:
            return {}
        return {"systemReserved": {"cpu": reserved_cpu(allocatable, os.cpu_count() or 1)}}

    def _check_allocatable(self) -> None:
        """The Node's allocatable CPU is `settings.allocatable_cpu` (the kubelet counted this
        machine's CPUs as `os.cpu_count()` does)."""
        want = self.settings.allocatable_cpu
        if want is None:
            return
        status = self.cp.request("GET", f"/api/v1/nodes/{self.name}").json().get("status", {})
        got = str(status.get("allocatable", {}).get("cpu", "?"))
        if got == "?" or parse_quantity(got) != parse_quantity(want):
            capacity = status.get("capacity", {}).get("cpu", "?")
            raise HarnessError(
                f"Node {self.name}: allocatable cpu {got}, not {want} (capacity {capacity}, "
                f"{os.cpu_count()} CPUs here)"
            )

    def _kubeconfig(self) -> dict[str, Any]:
        pki = self.cp.pki
        assert pki is not None
        pair = issue_client_cert(
            pki.ca, self.work / "kubelet" / "pki", "client", f"system:node:{self.name}",
            "system:nodes",
        )  # fmt: skip
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.cp.server,
                        "certificate-authority": str(pki.ca.cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "node",
                    "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)},
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "node"}}],
            "current-context": "e2e",
        }

    def _grant_node_role(self) -> None:
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"edl-e2e-node-{self.name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": f"system:node:{self.name}",
                }
            ],
        }
        url = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
        self.cp.request("POST", url, json=binding, ok=(201, 409))

    def _start_kubelet(self) -> None:
        pki = self.cp.pki
        assert pki is not None
        kdir = self.work / "kubelet"
        (kdir / "root").mkdir(parents=True, exist_ok=True)
        (kdir / "volume-plugins").mkdir(parents=True, exist_ok=True)
        self._make_cgroup_root()
        issue_serving_cert(
            pki.ca, kdir / "pki", "serving", self.name, dns=(self.name,), ips=(self.ip,)
        )
        kubeconfig = kdir / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self._kubeconfig()))
        self._grant_node_role()
        port, healthz = free_port(), free_port()
        config = kdir / "config.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config(port, healthz)))
        self.cp.request("DELETE", f"/api/v1/nodes/{self.name}", ok=(200, 404))
        labels = ",".join(f"{k}={v}" for k, v in self.settings.node_labels.items())
        self.kubelet = ManagedProcess(
            "kubelet",
            [
                str(self.settings.bin_dir / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={kdir / 'root'}",
                f"--cert-dir={kdir / 'pki'}",
                f"--hostname-override={self.name}",
                "--cloud-provider=external",  # addresses: set by _set_addresses
                *([f"--node-labels={labels}"] if labels else []),
                "--v=2",
            ],
            self.log_dir / "kubelet.log",
        )
        self.kubelet.start()
        self._wait(self.kubelet, self._set_addresses, f"Node {self.name} registered")
        self._wait(self.kubelet, self._node_ready, f"Node {self.name} Ready=True")
        self._check_allocatable()
        self._untaint()

    def _set_addresses(self) -> bool:
        """What a cloud controller manager does for `--cloud-provider=external`: the Node's
        addresses (the kubelet keeps them once set). False until the Node is registered."""
        found = self.cp.request("GET", f"/api/v1/nodes/{self.name}", ok=(200, 404))
        if found.status_code == 404:
            return False
        addresses = [
            {"type": "InternalIP", "address": self.ip},
            {"type": "Hostname", "address": self.ip},
        ]
        self.cp.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}/status",
            headers={"Content-Type": "application/merge-patch+json"},
            json={"status": {"addresses": addresses}},
        )
        return True

    def _untaint(self) -> None:
        """Removes `node.kubernetes.io/not-ready:NoSchedule`, as the node lifecycle controller
        does once a node is Ready: kube-apiserver's TaintNodesByCondition admission puts it on
        every new Node, and kube-controller-manager here runs no node lifecycle controller (it
        would mark the pod runner's Node objects, which have no kubelet, unreachable); and
        `node.cloudprovider.kubernetes.io/uninitialized`, as a cloud controller manager does
        once it set the addresses."""
        node = self.cp.request("GET", f"/api/v1/nodes/{self.name}").json()
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") not in (NOT_READY_TAINT, UNINITIALIZED_TAINT)]
        if len(kept) == len(taints):
            return
        self.cp.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}",
            headers={"Content-Type": "application/merge-patch+json"},
            json={"spec": {"taints": kept or None}},
        )

    def _node_ready(self) -> bool:
        node = self.cp.request("GET", f"/api/v1/nodes/{self.name}").json()
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    # ---- cgroups -----------------------------------------------------------------------------

    def _cgroup_dirs(self) -> list[Path]:
        """The node's cgroup root in every mounted hierarchy (v1 controllers and v2)."""
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        out = []
        for line in mounts:
            parts = line.split()
            if len(parts) >= 3 and parts[2] in ("cgroup", "cgroup2"):
                out.append(Path(parts[1]) / self.cgroup_root.lstrip("/"))
        return out

    def _make_cgroup_root(self) -> None:
        for d in self._cgroup_dirs():
            d.mkdir(exist_ok=True)

    def _remove_cgroups(self) -> None:
        for d in self._cgroup_dirs():
            if not d.exists():
                continue
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                _rmdir_quiet(sub)
            _rmdir_quiet(d)

    # ---- teardown ----------------------------------------------------------------------------

    def _remove_containers(self) -> None:
        if self.containerd is None or not self.containerd.alive():
            return
        for line in self.ctr("tasks", "ls").splitlines()[1:]:
            task = line.split()[0]
            self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, timeout_s=30)
        for task in (line.split()[0] for line in self.ctr("tasks", "ls").splitlines()[1:]):
            try:
                self.ctr("tasks", "delete", "--force", task, timeout_s=30)
            except HarnessError as e:
                print(f"stopping the e2e node: {e}")
        for container in self.ctr("containers", "ls", "-q").split():
            self.ctr("containers", "delete", container, timeout_s=30)

    def _stop_shims(self) -> None:
        """The shims of this node's containerd (found by their `-address` argument), by PID."""
        needle = str(self.socket).encode()
        shim = str(self.settings.bin_dir / "containerd-shim-runc-v2").encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0] == shim and any(needle in a for a in argv):
                try:
                    os.kill(int(proc.name), 9)
                except ProcessLookupError:
                    pass

    def _remove_state(self) -> None:
        """containerd's and the kubelet's state (GBs of image snapshots); the logs stay."""
        for folder in (self.work / "containerd", self.work / "kubelet", self.socket.parent):
            shutil.rmtree(folder, ignore_errors=True)

    def _unmount_leftovers(self) -> None:
        roots = (str(self.work), str(self.socket.parent))
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(roots):
                points.append(point)
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30, check=False)

    def _wait(self, proc: ManagedProcess, check: Any, what: str) -> None:
        try:
            wait_for(
                check,
                timeout_s=self.settings.ready_timeout_s,
                what=what,
                give_up=lambda: None if proc.alive() else f"{proc.name} exited",
            )
        except WaitTimeout as e:
            raise HarnessError(proc.describe_failure(str(e))) from e


def _rmdir_quiet(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


class KubeletNodeGroup:
    """Several nodes on one machine: started one after the other, stopped all; an image
    saved from podman once and imported into each."""

    def __init__(self, nodes: list[KubeletNode], archive_dir: Path) -> None:
        self.nodes = nodes
        self.archive_dir = archive_dir

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def start(self) -> None:
        """Starts every node (HarnessError from the first that does not come up)."""
        for node in self.nodes:
            node.start()

    def stop(self) -> None:
        """Stops every node that was started; removes the saved images. Never raises."""
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.archive_dir, ignore_errors=True)

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"===== {n.name} ({n.ip}) =====\n{n.log_tails(lines)}" for n in self.nodes)

    def import_image(self, ref: str, timeout_s: float = 900.0) -> dict[str, float]:
        """`ref` into every node's containerd (one `podman save`); node name -> seconds its
        import took (0 where it had it already).

        Raises:
            HarnessError: podman or ctr failed, or ran past `timeout_s`.
        """
        took: dict[str, float] = {}
        missing = [n for n in self.nodes if ref not in n.images()]
        if not missing:
            return {n.name: 0.0 for n in self.nodes}
        self.archive_dir.mkdir(parents=True, exist_ok=True)
        archive = self.archive_dir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", ref) + ".tar")
        save_image(ref, archive, timeout_s)
        try:
            for node in self.nodes:
                t0 = time.monotonic()
                node.import_image(ref, archive=archive, timeout_s=timeout_s)
                took[node.name] = round(time.monotonic() - t0, 1) if node in missing else 0.0
        finally:
            archive.unlink(missing_ok=True)  # 1.3 GB for the trainer image
        return took


def save_image(ref: str, path: Path, timeout_s: float = 600.0) -> Path:
    """`podman save --format docker-archive <ref>` into `path`; returns `path`.

    Raises:
        HarnessError: podman failed (its message) or ran past `timeout_s`.
    """
    try:
        with path.open("wb") as archive:
            saved = subprocess.run(
                ["podman", "save", "--format", "docker-archive", ref],
                stdout=archive, stderr=subprocess.PIPE, timeout=timeout_s, check=False,
            )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        raise HarnessError(f"podman save {ref} ran past {timeout_s:.0f} s") from e
    if saved.returncode != 0:
        raise HarnessError(f"podman save {ref} failed: {saved.stderr.decode().strip()}")
    return path


def _podman_has(ref: str) -> bool:
    done = subprocess.run(
        ["podman", "image", "exists", ref], capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0
