"""The control loop of the demo: the real `edl-adapter` (with its sizer) and the HPA model.

:class:`DemoAdapter` runs `edl-adapter serve` on 127.0.0.1 over HTTPS: pods from the static
file the simulated cluster writes (it scrapes their agents), the sizer on the static
capacity file (re-read when it changes). :class:`HpaLoop` is the HPA: every sync period it
reads the External metric ``desired_replicas`` through the external metrics API, exactly the
request kube-controller-manager makes, and steps the HPA model
(`edl_sim.hpa.HorizontalController`) of the example HPA
``manifests/examples/digits-trainer/hpa-sizing.yaml`` on it.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from edl_common.quantity import milli_value
from edl_sim.hpa.controller import ControllerSettings, Decision, HorizontalController
from edl_sim.hpa.manifest import load_hpa
from edl_sim.hpa.sync import MetricValues
from examples.demo.cluster import JOB_LABEL, JobSpec
from examples.demo.probe import fetch_json, insecure_tls
from examples.demo.processes import ProcessGroup

REPO_ROOT = Path(__file__).resolve().parents[2]
HPA_FILE = REPO_ROOT / "manifests" / "examples" / "digits-trainer" / "hpa-sizing.yaml"
CATALOGUE = REPO_ROOT / "metrics_adapter" / "scraping" / "catalogue.default.yaml"
METRIC = "desired_replicas"


@dataclass(frozen=True)
class AdapterFiles:
    """What the adapter reads, written by the simulated cluster."""

    pods: Path
    capacity: Path
    catalogue: Path
    log: Path
    cert_dir: Path


def write_catalogue(path: Path, window_s: int) -> None:
    """The built-in catalogue with a shorter window: the demo's time runs faster, so the
    sizer measures a size after ``window_s`` steady seconds instead of 30."""
    doc = yaml.safe_load(CATALOGUE.read_text())
    doc["window"] = f"{window_s}s"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


class DemoAdapter:
    """One `edl-adapter serve` process with the sizer on, and HTTPS reads of its API."""

    def __init__(self, procs: ProcessGroup, files: AdapterFiles, port: int) -> None:
        self._procs = procs
        self.files = files
        self.port = port
        self._tls = insecure_tls()  # its certificate is self-signed for 127.0.0.1
        self._proc: Any = None

    @property
    def url(self) -> str:
        """Base URL."""
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        """Starts the adapter and waits (bounded) until its discovery document answers.

        Raises:
            RuntimeError: it exited or did not answer in time (the message has its log).
        """
        f = self.files
        argv = [
            sys.executable, "-m", "metrics_adapter", "serve",
            "--host=127.0.0.1", f"--port={self.port}", f"--cert-dir={f.cert_dir}",
            "--authentication=none", "--authorization=none",
            "--source=static", f"--static-file={f.pods}", "--scrape-interval=1s",
            "--reload-interval=1s", f"--metrics-config={f.catalogue}",
            "--sizing", "--sizing-capacity=static", f"--sizing-capacity-file={f.capacity}",
            "--sizing-history=memory", "--sizing-interval=1s", "--sizing-history-interval=2s",
            # One worker was measured at the start: let the job try its maximum of 3 at once.
            "--sizing-exploration=3",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        self._proc = self._procs.spawn(argv, f.log, env, REPO_ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._proc.poll() is None:
            if self.get("/apis/external.metrics.k8s.io/v1beta1") is not None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"edl-adapter did not start:\n{f.log.read_text()[-3000:]}")

    def get(self, path: str) -> dict[str, Any] | None:
        """GET an API path; None unless it answers 200 with JSON."""
        return fetch_json(self.url + path, self._tls)

    def external_path(self, job: JobSpec) -> str:
        """The request the HPA makes for the job's ``desired_replicas``."""
        selector = urllib.parse.quote(f"{JOB_LABEL}={job.name}", safe="")
        return (
            f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{job.namespace}/{METRIC}"
            f"?labelSelector={selector}"
        )

    def desired_replicas(self, job: JobSpec) -> list[int] | None:
        """The items' values in milli-units, as the HPA reads them (None: an error)."""
        body = self.get(self.external_path(job))
        if body is None:
            return None
        return [milli_value(str(item["value"])) for item in body.get("items", [])]

    def sizing_plan(self, job: JobSpec) -> dict[str, Any] | None:
        """The sizer's latest decision for the job (``/debug/sizing``), None before one."""
        page = self.get("/debug/sizing")
        plan = page.get("plan") if page else None
        if not isinstance(plan, dict):
            return None
        for entry in plan.get("jobs", []):
            if entry.get("job") == job.key:
                return {**entry, "free": plan.get("free", {})}
        return None


class HpaLoop:
    """The HPA on ``desired_replicas``: one model step per sync period."""

    def __init__(self, sync_period: float = 1.0, hpa_file: Path = HPA_FILE) -> None:
        self.spec = load_hpa(hpa_file).spec
        self.sync_period = sync_period
        self._model = HorizontalController(self.spec, ControllerSettings(sync_period=sync_period))
        self._next = sync_period
        self.last: Decision | None = None
        self.last_read = "-"
        """The values read at the last sync, as the view shows them."""

    def due(self, now: float) -> bool:
        """Whether a sync is due at ``now`` (seconds since the demo began)."""
        return now >= self._next

    def sync(self, now: float, replicas: int, values: list[int] | None) -> Decision:
        """One reconcile on what the metrics API answered (None or [] is the HPA's error
        case: it keeps the scale)."""
        self._next = now + self.sync_period
        self.last_read = (
            "(no item: the HPA keeps the scale)"
            if not values
            else " + ".join(f"{v / 1000:g}" for v in values)
        )
        metrics = MetricValues(external={METRIC: values}) if values else MetricValues()
        self.last = self._model.step(now, replicas, metrics)
        return self.last
