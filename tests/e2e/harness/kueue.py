"""Kueue's manager on 127.0.0.1 against the loopback control plane, its webhooks reachable.

The binary, CRDs and webhook configurations come from `tests/e2e/kueue/build.sh` (built from
the Go module proxy and cached outside the clone). Kueue runs as it does in a cluster but for
where its webhooks live: kube-apiserver calls them through a Service of `type: ExternalName`
(`kueue-webhook-service.kueue-system` -> 127.0.0.1, the only Service kind whose target may be
loopback), verifying a serving certificate the harness makes for that Service's DNS name
against the configurations' caBundle (Kueue's own certificate rotation needs a kubelet to mount
its Secret: `internalCertManagement.enable: false`, as with cert-manager). Only namespaces
labelled `edl.e2e/kueue: "true"` go through its pod and Deployment webhooks
(`managedJobsNamespaceSelector` and each webhook's namespaceSelector), so the other e2e tests'
pods never wait on Kueue; `stop()` removes the webhook configurations.

Kueue's manager runs in a folder of its own as its root (`chroot`), laid out as its
Deployment's container sees its mounts: with its certificate rotation off it reads a metrics
serving certificate from a fixed path, /etc/kueue/metrics/certs (a Secret volume in a
cluster); the folder holds the binary (a hard link to the cached one), its configuration, a
kubeconfig with the credentials inline and the certificates. It shares the host's network.

Integrations: `batch/job`, `pod` and `deployment` (a Deployment labelled
`kueue.x-k8s.io/queue-name` has each pod admitted as a Workload of its own, gated by
`kueue.x-k8s.io/admission` until then; a Job is suspended until its Workload is admitted).
"""

from __future__ import annotations

import base64
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.e2e.harness.certs import make_webhook_pki
from tests.e2e.harness.controlplane import REPO_ROOT, ControlPlane
from tests.e2e.harness.processes import HarnessError, ManagedProcess, built_folder, free_port
from tests.support.waiting import WaitTimeout, wait_for

BUILD_SCRIPT = REPO_ROOT / "tests" / "e2e" / "kueue" / "build.sh"
NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
MANAGED_LABEL = ("edl.e2e/kueue", "true")
"""The namespaces whose Deployments and pods Kueue manages here."""
WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
_ADMISSION = "/apis/admissionregistration.k8s.io/v1"
_KEPT_RESOURCES = {
    ("", "pods"),
    ("apps", "deployments"),
    ("batch", "jobs"),
    ("kueue.x-k8s.io", "*"),
}
"""The webhooks kept: the three integrations' and Kueue's own objects' (the other frameworks'
kinds do not exist here)."""


def ensure_kueue(timeout_s: float = 3600.0) -> Path:
    """Runs build.sh (instant when cached) under a lock; returns the cache folder.

    Raises:
        HarnessError: the build failed; the message holds its last output lines.
    """
    return built_folder(BUILD_SCRIPT, "kueue.lock", "Kueue build", timeout_s, ("bin/kueue",))


@dataclass
class KueueSettings:
    """Where Kueue's files are and how long a start may take."""

    cache_dir: Path
    """build.sh's folder: bin/kueue, crds/, webhooks.yaml."""
    work_dir: Path
    """Scratch folder: its configuration, certificates and log."""
    ready_timeout_s: float = 180.0


class Kueue:
    """Installs Kueue's CRDs, starts its manager and registers its webhooks; stops it."""

    def __init__(self, cp: ControlPlane, settings: KueueSettings) -> None:
        self.cp = cp
        self.settings = settings
        self.process: ManagedProcess | None = None
        self.webhook_port = 0

    def start(self) -> None:
        """CRDs, namespace, certificates, the manager, then its webhooks, each checked.

        Raises:
            HarnessError: something did not become ready; the message has Kueue's log tail.
        """
        work = self.settings.work_dir
        root = work / "root"
        root.mkdir(parents=True, exist_ok=True)
        self._install_crds()
        self.cp.request("POST", "/api/v1/namespaces", ok=(201, 409),
                        json={"metadata": {"name": NAMESPACE}})  # fmt: skip
        dns = f"{SERVICE}.{NAMESPACE}.svc"
        ca, _ = make_webhook_pki(root / "serving-certs", SERVICE, (dns, f"{dns}.cluster.local"))
        make_webhook_pki(root / "etc/kueue/metrics/certs", "kueue-metrics", ("localhost",))
        binary = root / "kueue"
        if not binary.exists():
            try:
                os.link(self.settings.cache_dir / "bin" / "kueue", binary)
            except OSError:  # another filesystem: a copy
                shutil.copy2(self.settings.cache_dir / "bin" / "kueue", binary)
        (root / "kubeconfig").write_text(yaml.safe_dump(self._kubeconfig()))
        self.webhook_port = free_port()
        health = free_port()
        (root / "config.yaml").write_text(yaml.safe_dump(self._configuration(health)))
        self.process = ManagedProcess(
            "kueue",
            [
                "chroot",
                str(root),
                "/kueue",
                "--config=/config.yaml",
                "--kubeconfig=/kubeconfig",
                "--feature-gates=VisibilityOnDemand=false",
                "--zap-log-level=2",
            ],
            work / "kueue.log",
        )
        self.process.start()
        self._wait(lambda: _ok(f"http://127.0.0.1:{health}/readyz"), "Kueue's /readyz")
        self._register_webhooks(ca.cert.read_bytes())
        # through kube-apiserver: a ResourceFlavor passes Kueue's webhooks over TLS
        flavor = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "edl-e2e-probe"},
        }
        url = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
        self._wait(
            lambda: self.cp.request("POST", f"{url}?dryRun=All", json=flavor, ok=(201,)),
            "kube-apiserver calling Kueue's webhooks",
        )

    def stop(self) -> None:
        """Removes the webhook configurations, then stops the manager; never raises."""
        for kind, name in WEBHOOK_CONFIGURATIONS.items():
            plural = kind.lower() + "s"
            try:
                self.cp.request("DELETE", f"{_ADMISSION}/{plural}/{name}", ok=(200, 404))
            except Exception as e:  # teardown goes on
                print(f"deleting {kind} {name} failed: {e!r}")
        if self.process is not None:
            self.process.stop()

    def log_tails(self, lines: int = 30) -> str:
        """Kueue's last log lines, for a failing test's report."""
        if self.process is None:
            return ""
        return f"----- kueue ({self.process.log}) -----\n{self.process.tail(lines)}"

    # ---- steps -------------------------------------------------------------------------------

    def _kubeconfig(self) -> dict[str, Any]:
        """The admin kubeconfig with its files inline (the chroot holds no other file)."""
        pki = self.cp.pki
        assert pki is not None

        def inline(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        cluster = {"server": self.cp.server, "certificate-authority-data": inline(pki.ca.cert)}
        user = {
            "client-certificate-data": inline(pki.admin.cert),
            "client-key-data": inline(pki.admin.key),
        }
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": cluster}],
            "users": [{"name": "admin", "user": user}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }

    def _configuration(self, health: int) -> dict[str, Any]:
        key, value = MANAGED_LABEL
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.webhook_port,
                "certDir": "/serving-certs",
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "managedJobsNamespaceSelector": {"matchLabels": {key: value}},
            "integrations": {"frameworks": ["batch/job", "pod", "deployment"]},
        }

    def _install_crds(self) -> None:
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        names = []
        for path in sorted((self.settings.cache_dir / "crds").glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            self.cp.request("POST", base, json=crd, ok=(201, 409))
            names.append(crd["metadata"]["name"])

        def established() -> bool:
            for name in names:
                conditions = self.cp.request("GET", f"{base}/{name}").json()["status"]
                if not any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in conditions.get("conditions", [])
                ):
                    return False
            return True

        self._wait(established, "Kueue's CRDs Established")

    def _register_webhooks(self, ca_pem: bytes) -> None:
        """The module's webhook configurations, named and pointed as kustomize would, at us."""
        self.cp.request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/services",
            ok=(201, 409),
            json={
                "metadata": {"name": SERVICE},
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
            },
        )
        bundle = base64.b64encode(ca_pem).decode()
        key, value = MANAGED_LABEL
        docs = yaml.safe_load_all((self.settings.cache_dir / "webhooks.yaml").read_text())
        for doc in docs:
            if not doc or doc.get("kind") not in WEBHOOK_CONFIGURATIONS:
                continue
            name = WEBHOOK_CONFIGURATIONS[doc["kind"]]
            kept = []
            for hook in doc.get("webhooks") or []:
                if not any(
                    (group, resource) in _KEPT_RESOURCES or (group, "*") in _KEPT_RESOURCES
                    for rule in hook.get("rules") or []
                    for group in rule.get("apiGroups") or []
                    for resource in rule.get("resources") or []
                ):
                    continue
                service = hook["clientConfig"]["service"]
                hook["clientConfig"] = {
                    "caBundle": bundle,
                    "service": {
                        "name": SERVICE,
                        "namespace": NAMESPACE,
                        "path": service["path"],
                        "port": self.webhook_port,
                    },
                }
                hook["namespaceSelector"] = {"matchLabels": {key: value}}
                kept.append(hook)
            body = {**doc, "metadata": {"name": name}, "webhooks": kept}
            plural = doc["kind"].lower() + "s"
            self.cp.request("DELETE", f"{_ADMISSION}/{plural}/{name}", ok=(200, 404))
            self.cp.request("POST", f"{_ADMISSION}/{plural}", json=body, ok=(201,))

    def _wait(self, check: Any, what: str) -> None:
        proc = self.process
        try:
            wait_for(
                check,
                timeout_s=self.settings.ready_timeout_s,
                what=what,
                give_up=(lambda: None if proc.alive() else "Kueue exited") if proc else None,
            )
        except WaitTimeout as e:
            tail = proc.describe_failure(str(e)) if proc else str(e)
            raise HarnessError(tail) from e


def _ok(url: str) -> bool:
    return requests.get(url, timeout=5).status_code == 200
