"""A real etcd + kube-apiserver + kube-controller-manager (+ kube-scheduler) on 127.0.0.1.

kube-scheduler is started on demand (`start_scheduler`): tests whose pods are run by the
pod runner without nodes must not have a scheduler marking them unschedulable.

The binaries come from `tests/e2e/controlplane/build.sh` (built from the Go module proxy and
cached outside the clone). Every port is picked free at start; every wait is bounded; `stop()`
always tears everything down. Each component logs into its own file under `work_dir/logs`.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.e2e.harness.certs import ClusterPKI, make_cluster_pki
from tests.e2e.harness.processes import HarnessError, ManagedProcess, built_folder, free_port
from tests.support.waiting import WaitTimeout, wait_for

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "tests" / "e2e" / "controlplane" / "build.sh"
ADAPTER_SERVICE = "edl-metrics-adapter"
ADAPTER_SERVICE_NAMESPACE = "kube-system"
KCM_CONTROLLERS = (
    "horizontal-pod-autoscaler-controller",
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "resourcequota-controller",  # fills in ResourceQuota status (the sizing e2e reads it)
)
SERVICE_ACCOUNT_CONTROLLERS = (
    "serviceaccount-controller",  # each namespace's `default` ServiceAccount
    "root-ca-certificate-publisher-controller",  # each namespace's ConfigMap kube-root-ca.crt
    "serviceaccount-token-controller",  # legacy token Secrets (needs the private key)
)
"""What `ControlPlaneSettings.service_accounts` adds to kube-controller-manager. A pod's
projected token volume (added by the ServiceAccount admission plugin) holds a token the kubelet
requests from kube-apiserver (TokenRequest, signed with `--service-account-signing-key-file`),
`ca.crt` from the namespace's ConfigMap kube-root-ca.crt (published from `--root-ca-file`) and
the namespace (downward API): the kubelet does not start the pod until all three are there."""


def ensure_binaries(timeout_s: float = 3600.0) -> Path:
    """Runs build.sh (instant when cached) under a lock and returns the bin directory.

    Raises:
        HarnessError: the build failed; the message holds its last output lines.
    """
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    return built_folder(BUILD_SCRIPT, "controlplane.lock", "control-plane build", timeout_s, names)


@dataclass
class ControlPlaneSettings:
    """How the loopback control plane is started."""

    bin_dir: Path
    """Folder holding etcd, kube-apiserver and kube-controller-manager."""
    work_dir: Path
    """Scratch folder: PKI, etcd data, kubeconfig and `logs/`."""
    hpa_sync_period: str = "1s"
    """`--horizontal-pod-autoscaler-sync-period` (the real default is 15s)."""
    hpa_downscale_stabilization: str = "5m"
    """`--horizontal-pod-autoscaler-downscale-stabilization` (the real default; HPAs that want
    faster scale-down say so in `spec.behavior`)."""
    kcm_verbosity: int = 2
    """`--v` for kube-controller-manager (4 logs each HPA proposal)."""
    kcm_vmodule: str = "horizontal=4"
    """`--vmodule` for kube-controller-manager: the HPA controller's file at 4, so each sync
    logs "Proposing desired replicas" and "Decided not to scale" (the differential test reads
    them) without the rest of the controller manager's level-4 noise. Empty: not passed."""
    ready_timeout_s: float = 180.0
    """Bound on each component's wait for health."""
    extra_feature_gates: dict[str, bool] = field(default_factory=dict)
    """Feature gates set on kube-apiserver, kube-controller-manager and kube-scheduler (an
    alpha feature such as gang scheduling needs the same gates on each)."""
    runtime_config: tuple[str, ...] = ()
    """kube-apiserver's `--runtime-config` entries, e.g. `scheduling.k8s.io/v1alpha1=true` (an
    alpha API is not served without it, whatever the gates say)."""
    etcd_quota_bytes: int = 1 << 30
    """etcd's `--quota-backend-bytes` (the scale bench holds 150,000 pods: more)."""
    apiserver_extra_args: tuple[str, ...] = ()
    """Anything else for kube-apiserver (the scale bench raises its in-flight limits)."""
    service_accounts: bool = False
    """Pods get ServiceAccount tokens as on a real cluster (`SERVICE_ACCOUNT_CONTROLLERS`):
    kube-apiserver's ServiceAccount admission plugin on (it is off otherwise: it refuses a pod
    created before its namespace's `default` ServiceAccount exists, and the pod runner's tests
    create pods right after their namespace) and kube-controller-manager with the controllers
    and keys it needs. The kubelet session turns it on (docs/development.md, "The e2e node")."""
    extra_controllers: tuple[str, ...] = ()
    """kube-controller-manager controllers beside `KCM_CONTROLLERS` (the kubelet session adds
    `endpointslice-controller`: a Service's EndpointSlice follows its pods' readiness)."""


class ControlPlane:
    """Starts, health-checks and stops the three components; writes an admin kubeconfig."""

    def __init__(self, settings: ControlPlaneSettings) -> None:
        self.settings = settings
        self.work_dir = settings.work_dir
        self.log_dir = self.work_dir / "logs"
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        self.pki: ClusterPKI | None = None
        self.apiserver_port = 0
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self.controller_manager: ManagedProcess | None = None
        self.scheduler: ManagedProcess | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Brings up etcd, kube-apiserver and kube-controller-manager, each healthy in turn.

        Raises:
            HarnessError: a component did not become healthy; the message has its log tail.
        """
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.pki = make_cluster_pki(
            self.work_dir / "pki",
            adapter_service_dns=(
                f"{ADAPTER_SERVICE}.{ADAPTER_SERVICE_NAMESPACE}.svc",
                f"{ADAPTER_SERVICE}.{ADAPTER_SERVICE_NAMESPACE}.svc.cluster.local",
            ),
        )
        self._start_etcd()
        self._start_apiserver()
        self._write_kubeconfig()
        self._start_controller_manager()

    def stop(self) -> None:
        """Stops every component that was started, newest first; never raises.

        The logs, PKI and kubeconfig stay in `work_dir`; etcd's data is removed.
        """
        for proc in (self.scheduler, self.controller_manager, self.apiserver, self.etcd):
            if proc is not None:
                try:
                    proc.stop()
                except Exception as e:  # teardown must reach every component
                    print(f"stopping {proc.name} failed: {e!r}")
        shutil.rmtree(self.work_dir / "etcd-data", ignore_errors=True)

    def components(self) -> list[ManagedProcess]:
        procs = (self.etcd, self.apiserver, self.controller_manager, self.scheduler)
        return [p for p in procs if p]

    def start_scheduler(self) -> None:
        """Starts kube-scheduler (same module and version) and waits for its /healthz.

        Raises:
            HarnessError: it did not become healthy; the message has its log tail.
        """
        port = free_port()
        argv = [
            str(self.settings.bin_dir / "kube-scheduler"),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.work_dir / 'scheduler-certs'}",
            "--v=2",
        ]
        gates = self._feature_gates()
        if gates:
            argv.append(f"--feature-gates={gates}")
        self.scheduler = ManagedProcess("kube-scheduler", argv, self.log_dir / "kube-scheduler.log")
        self.scheduler.start()

        def healthy() -> bool:
            with warnings.catch_warnings():  # its serving cert is self-signed
                warnings.simplefilter("ignore")
                r = requests.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=5)
            return r.status_code == 200

        self._wait_healthy(self.scheduler, healthy)

    def stop_scheduler(self) -> None:
        """Stops kube-scheduler (no-op when it is not running)."""
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None

    def log_tails(self, lines: int = 30) -> str:
        """Every component's last log lines, for a failing test's report."""
        parts = []
        for p in self.components():
            parts.append(f"----- {p.name} ({p.log}) -----\n{p.tail(lines)}")
        return "\n".join(parts)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    # ---- components ------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        data = self.work_dir / "etcd-data"
        self.etcd = ManagedProcess(
            "etcd",
            [
                str(self.settings.bin_dir / "etcd"),
                "--name=e2e",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                f"--quota-backend-bytes={self.settings.etcd_quota_bytes}",
                "--log-level=warn",
            ],
            self.log_dir / "etcd.log",
        )
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.etcd.start()

        def healthy() -> bool:
            r = requests.get(f"{self.etcd_url}/health", timeout=2)
            return r.status_code == 200 and r.json().get("health") == "true"

        self._wait_healthy(self.etcd, healthy)

    def _start_apiserver(self) -> None:
        assert self.pki is not None
        pki = self.pki
        self.apiserver_port = free_port()
        gates = self._feature_gates()
        argv = [
            str(self.settings.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.work_dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.apiserver.cert}",
            f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.service_account_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--authorization-mode=RBAC",
            f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
            f"--proxy-client-key-file={pki.front_proxy_client.key}",
            f"--kubelet-client-certificate={pki.kubelet_client.cert}",
            f"--kubelet-client-key={pki.kubelet_client.key}",
            "--endpoint-reconciler-type=none",
            *self._admission_args(),
            "--enable-priority-and-fairness=false",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *self.settings.apiserver_extra_args,
        ]
        if gates:
            argv.append(f"--feature-gates={gates}")
        if self.settings.runtime_config:
            argv.append(f"--runtime-config={','.join(self.settings.runtime_config)}")
        self.apiserver = ManagedProcess("kube-apiserver", argv, self.log_dir / "kube-apiserver.log")
        self.apiserver.start()

        def healthy() -> bool:
            r = requests.get(
                f"{self.server}/readyz",
                cert=(str(pki.admin.cert), str(pki.admin.key)),
                verify=str(pki.ca.cert),
                timeout=5,
            )
            return r.status_code == 200

        self._wait_healthy(self.apiserver, healthy)

    def _admission_args(self) -> list[str]:
        """ServiceAccount admission off unless `settings.service_accounts`."""
        if self.settings.service_accounts:
            return []
        return ["--disable-admission-plugins=ServiceAccount"]

    def _start_controller_manager(self) -> None:
        s = self.settings
        assert self.pki is not None
        controllers = [*KCM_CONTROLLERS, *s.extra_controllers]
        keys: list[str] = []
        if s.service_accounts:
            controllers += SERVICE_ACCOUNT_CONTROLLERS
            keys = [
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca.cert}",
            ]
        argv = [
            str(s.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(controllers)}",
            *keys,
            "--leader-elect=false",
            "--secure-port=0",
            f"--horizontal-pod-autoscaler-sync-period={s.hpa_sync_period}",
            f"--horizontal-pod-autoscaler-downscale-stabilization={s.hpa_downscale_stabilization}",
            f"--v={s.kcm_verbosity}",
            *([f"--vmodule={s.kcm_vmodule}"] if s.kcm_vmodule else []),
        ]
        gates = self._feature_gates()
        if gates:
            argv.append(f"--feature-gates={gates}")
        self.controller_manager = ManagedProcess(
            "kube-controller-manager", argv, self.log_dir / "kube-controller-manager.log"
        )
        self.controller_manager.start()
        self._wait_controllers_working()

    def _wait_controllers_working(self) -> None:
        """KCM serves no health port here: prove it works by having it reconcile a Deployment."""
        assert self.controller_manager is not None
        name = "edl-e2e-kcm-probe"
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"edl-e2e-probe": name}},
                "template": {
                    "metadata": {"labels": {"edl-e2e-probe": name}},
                    "spec": {"containers": [{"name": "c", "image": "edl-e2e.invalid/none"}]},
                },
            },
        }
        base = f"{self.server}/apis/apps/v1/namespaces/kube-system/deployments"
        self.request("POST", base, json=deployment, ok=(201, 409))

        def reconciled() -> bool:
            d = self.request("GET", f"{base}/{name}").json()
            observed = d.get("status", {}).get("observedGeneration", 0)
            return bool(observed >= d["metadata"]["generation"])

        self._wait_healthy(self.controller_manager, reconciled)
        self.request("DELETE", f"{base}/{name}", ok=(200, 202, 404))

    # ---- helpers ---------------------------------------------------------------------------

    def _feature_gates(self) -> str:
        return ",".join(
            f"{k}={'true' if v else 'false'}" for k, v in self.settings.extra_feature_gates.items()
        )

    def request(
        self, method: str, url: str, *, ok: tuple[int, ...] = (200,), **kw: Any
    ) -> requests.Response:
        """An admin request to kube-apiserver; raises HarnessError on an unexpected status."""
        assert self.pki is not None
        r = requests.request(
            method,
            url if url.startswith("https://") else f"{self.server}{url}",
            cert=(str(self.pki.admin.cert), str(self.pki.admin.key)),
            verify=str(self.pki.ca.cert),
            timeout=10,
            **kw,
        )
        if r.status_code not in ok:
            raise HarnessError(f"{method} {url} -> {r.status_code}: {r.text[:500]}")
        return r

    def _wait_healthy(self, proc: ManagedProcess, check: Callable[[], object]) -> None:
        """Polls `check` until it holds (an exception is "not yet").

        Raises:
            HarnessError: `proc` exited first, or the deadline passed; with its log tail.
        """
        try:
            wait_for(
                check,
                timeout_s=self.settings.ready_timeout_s,
                what=f"{proc.name} healthy",
                give_up=lambda: None if proc.alive() else "it exited",
            )
        except WaitTimeout as e:
            what = "exited before becoming healthy" if not proc.alive() else "not healthy in time"
            raise HarnessError(proc.describe_failure(f"{what} ({e})")) from e

    def _write_kubeconfig(self) -> None:
        assert self.pki is not None
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "edl-e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki.ca.cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "edl-e2e-admin",
                    "user": {
                        "client-certificate": str(self.pki.admin.cert),
                        "client-key": str(self.pki.admin.key),
                    },
                }
            ],
            "contexts": [
                {"name": "edl-e2e", "context": {"cluster": "edl-e2e", "user": "edl-e2e-admin"}}
            ],
            "current-context": "edl-e2e",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
