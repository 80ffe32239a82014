"""The real `edl-adapter`, run as a process and registered behind the aggregation layer.

The aggregator reaches it on 127.0.0.1 through a `Service` of `type: ExternalName` (the only
service kind whose target may be loopback) and three `APIService` objects. TLS is verified:
the adapter's serving certificate is signed by the cluster CA, names
`edl-metrics-adapter.kube-system.svc`, and that CA is the APIServices' `caBundle`.
"""

from __future__ import annotations

import base64
import shutil
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import requests
import yaml

from tests.e2e.harness.controlplane import (
    ADAPTER_SERVICE,
    ADAPTER_SERVICE_NAMESPACE,
    ControlPlane,
)
from tests.e2e.harness.processes import HarnessError, ManagedProcess, free_port
from tests.support.waiting import WaitTimeout, wait_for

API_SERVICES = (
    # (group, version, versionPriority): v1beta2 preferred, as the upstream adapters do.
    ("custom.metrics.k8s.io", "v1beta2", 200),
    ("custom.metrics.k8s.io", "v1beta1", 100),
    ("external.metrics.k8s.io", "v1beta1", 100),
)


def adapter_executable() -> str:
    """`edl-adapter` from the venv running the tests (or PATH)."""
    candidate = Path(sys.executable).parent / "edl-adapter"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("edl-adapter")
    if not found:
        raise HarnessError("edl-adapter is not installed (pip install -e '.[adapter]' in the venv)")
    return found


@dataclass
class AdapterSettings:
    """How the adapter process is started."""

    pod_selector: str = "app=trainer"
    """`--pod-selector`: which pods it discovers and scrapes."""
    scrape_interval: str = "1s"
    """`--scrape-interval`."""
    authentication: str = "delegated"
    """`--authentication`: `delegated` checks the aggregator's front-proxy client cert."""
    authorization: str = "delegated"
    """`--authorization`: `delegated` asks kube-apiserver via SubjectAccessReview."""
    extra_args: list[str] = field(default_factory=list)
    """Anything else to pass to `edl-adapter serve`."""
    ready_timeout_s: float = 60.0
    """Bound on the wait for its health endpoint."""
    window: str | None = "10s"
    """Rate window: the built-in catalogue with only `window` changed (None: built-in as is),
    so a load change shows in the HPA within seconds instead of the default 30 s."""
    access_log: bool = True
    """`--access-log`: every request in the adapter's log (the HPA's queries included)."""
    name: str = "edl-adapter"
    """The process name and its log file (`<name>.log`): several adapters may run."""
    kubeconfig: Path | None = None
    """`--kubeconfig` (default: the control plane's admin kubeconfig)."""


class MetricsAdapter:
    """One `edl-adapter serve` process on a fixed loopback port that survives restarts."""

    def __init__(self, control_plane: ControlPlane, settings: AdapterSettings) -> None:
        assert control_plane.pki is not None
        self.cp = control_plane
        self.pki = control_plane.pki
        self.settings = settings
        self.port = free_port()
        s = settings
        argv = [
            adapter_executable(),
            "serve",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--tls-cert-file={self.pki.adapter.cert}",
            f"--tls-private-key-file={self.pki.adapter.key}",
            "--source=kubernetes",
            f"--kubeconfig={s.kubeconfig or control_plane.kubeconfig}",
            f"--pod-selector={s.pod_selector}",
            f"--scrape-interval={s.scrape_interval}",
            f"--authentication={s.authentication}",
            f"--authorization={s.authorization}",
            *(["--access-log"] if s.access_log else []),
            *self._catalogue_args(),
            *s.extra_args,
        ]
        self.process = ManagedProcess(s.name, argv, control_plane.log_dir / f"{s.name}.log")

    def _catalogue_args(self) -> list[str]:
        if self.settings.window is None:
            return []
        text = (
            resources.files("metrics_adapter.scraping")
            .joinpath("catalogue.default.yaml")
            .read_text()
        )
        catalogue = yaml.safe_load(text)
        catalogue["window"] = self.settings.window
        path = self.cp.work_dir / f"{self.settings.name}-catalogue.yaml"
        path.write_text(yaml.safe_dump(catalogue, sort_keys=False))
        return [f"--metrics-config={path}"]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Starts the process and waits (bounded) until it answers over TLS.

        Raises:
            HarnessError: it exited or did not answer in time; the message has its log tail.
        """
        self.process.start()

        def answering() -> bool:
            if not self.process.alive():
                raise HarnessError(self.process.describe_failure("exited during start-up"))
            r = requests.get(f"{self.url}/healthz", verify=str(self.pki.ca.cert), timeout=2)
            return r.status_code == 200

        try:
            wait_for(
                answering,
                timeout_s=self.settings.ready_timeout_s,
                what="edl-adapter /healthz",
                abort_on=(HarnessError,),
            )
        except WaitTimeout as e:
            raise HarnessError(f"{e}\n{self.process.describe_failure('not healthy')}") from e

    def stop(self) -> None:
        self.process.stop()

    def register(self) -> None:
        """Creates (or replaces) the ExternalName Service and the three APIServices."""
        cp = self.cp
        ns = ADAPTER_SERVICE_NAMESPACE
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADAPTER_SERVICE, "namespace": ns},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
        }
        base = f"/api/v1/namespaces/{ns}/services"
        cp.request("DELETE", f"{base}/{ADAPTER_SERVICE}", ok=(200, 404))
        cp.request("POST", base, json=svc, ok=(201,))
        bundle = base64.b64encode(self.pki.ca.cert.read_bytes()).decode()
        for group, version, priority in API_SERVICES:
            name = f"{version}.{group}"
            obj = {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": name},
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": priority,
                    "caBundle": bundle,
                    "service": {"name": ADAPTER_SERVICE, "namespace": ns, "port": self.port},
                },
            }
            url = "/apis/apiregistration.k8s.io/v1/apiservices"
            cp.request("DELETE", f"{url}/{name}", ok=(200, 404))
            cp.request("POST", url, json=obj, ok=(201,))

    def availability(self) -> dict[str, tuple[str, str]]:
        """APIService name -> (Available status, message)."""
        out: dict[str, tuple[str, str]] = {}
        for group, version, _ in API_SERVICES:
            name = f"{version}.{group}"
            obj = self.cp.request("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
            conds = {c["type"]: c for c in obj.json().get("status", {}).get("conditions", [])}
            c = conds.get("Available", {})
            out[name] = (c.get("status", "Unknown"), c.get("message", ""))
        return out

    def wait_available(self, timeout_s: float = 60.0) -> None:
        """Waits until every APIService reports Available=True."""

        def all_available() -> bool:
            return all(status == "True" for status, _ in self.availability().values())

        wait_for(
            all_available,
            timeout_s=timeout_s,
            what="APIServices Available=True",
            describe=lambda: f"{self.availability()}\n{self.process.tail(30)}",
        )
