"""The adapter half of `make demo`: the agents' metrics as the HPA would read them.

Starts a real `edl-adapter serve` (TLS, static source listing the demo's agents) on 127.0.0.1,
reads `samples_per_second` through the custom metrics API (the path and JSON the HPA uses), and
steps the HPA model of `manifests/examples/digits-trainer/hpa-throughput.yaml` on those values
to say what a real HPA would decide. No cluster needed.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from metrics_adapter.hpa.controller import ControllerSettings, HorizontalController
from metrics_adapter.hpa.decision import Decision, MetricValues
from metrics_adapter.hpa.manifest import load_hpa
from metrics_adapter.quantity import milli_value, parse_quantity

REPO_ROOT = Path(__file__).resolve().parent.parent
HPA_FILE = REPO_ROOT / "manifests" / "examples" / "digits-trainer" / "hpa-throughput.yaml"
NAMESPACE = "ml"
DEPLOYMENT = "digits-trainer"
METRIC = "samples_per_second"
PODS_PATH = (
    f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}/pods/*/{METRIC}"
    "?labelSelector=app%3Dtrainer"
)
OBJECT_PATH = (
    f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}/deployments.apps/"
    f"{DEPLOYMENT}/{METRIC}"
)


class DemoAdapter:
    """One `edl-adapter serve` process over a static list of the demo's agents."""

    def __init__(self, workdir: Path, agent_ports: Sequence[int], port: int) -> None:
        self.port = port
        self.log = workdir / "edl-adapter.log"
        pods = [
            {
                "namespace": NAMESPACE,
                "name": f"{DEPLOYMENT}-rank{rank}",
                "labels": {"app": "trainer"},
                "deployment": DEPLOYMENT,
                "address": f"127.0.0.1:{agent_port}",
            }
            for rank, agent_port in enumerate(agent_ports)
        ]
        self.pods_file = workdir / "pods.yaml"
        self.pods_file.write_text(yaml.safe_dump({"pods": pods}, sort_keys=False))
        self._proc: subprocess.Popen[bytes] | None = None
        # The adapter's certificate is self-signed for 127.0.0.1: the demo trusts it as
        # `kubectl --insecure-skip-tls-verify` would.
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE

    def start(self, timeout: float = 30.0) -> None:
        """Starts the adapter and waits (bounded) until its discovery document answers."""
        cmd = [
            sys.executable,
            "-m",
            "metrics_adapter",
            "serve",
            "--host=127.0.0.1",
            f"--port={self.port}",
            "--source=static",
            f"--static-file={self.pods_file}",
            "--scrape-interval=1s",
            "--authentication=none",
            "--authorization=none",
            f"--cert-dir={self.log.parent / 'adapter-certs'}",
        ]
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self.get("/apis/custom.metrics.k8s.io/v1beta2") is not None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"edl-adapter did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """Stops the adapter (SIGTERM, then SIGKILL after 10 s)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def get(self, path: str) -> dict[str, Any] | None:
        """GET an API path; None when the adapter does not answer 200 (yet)."""
        url = f"https://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=3, context=self._tls) as r:
                body: dict[str, Any] = json.loads(r.read())
                return body
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def pod_values(self) -> dict[str, int]:
        """`samples_per_second` per pod in milli-units, as the HPA reads them."""
        body = self.get(PODS_PATH)
        items = body["items"] if body else []
        return {i["describedObject"]["name"]: milli_value(i["value"]) for i in items}


class HpaPreview:
    """Steps the HPA model every sync period on what the adapter serves."""

    def __init__(self, sync_period: float = 15.0) -> None:
        hpa = load_hpa(HPA_FILE)
        target = hpa.spec.metrics[0].source.target
        assert target.average_value_milli is not None, "the example HPA has an AverageValue target"
        self.target_per_pod = target.average_value_milli / 1000
        self.model = HorizontalController(hpa.spec, ControllerSettings(sync_period=sync_period))
        self.replicas = 0

    def decide(self, now: float, values: dict[str, int]) -> Decision:
        """One sync with the pods' values; the current size is the number of pods."""
        self.replicas = len(values)
        return self.model.step(now, self.replicas, MetricValues(pods={METRIC: values}))


def report(adapter: DemoAdapter, preview: HpaPreview, now: float) -> bool:
    """Prints what the HPA reads and decides; False when the adapter has nothing yet."""
    values = adapter.pod_values()
    if not values:
        return False
    total = adapter.get(OBJECT_PATH)
    job = parse_quantity(total["items"][0]["value"]) if total else None
    decision = preview.decide(now, values)
    per_pod = ", ".join(f"{name} {v / 1000:.0f}" for name, v in sorted(values.items()))
    print(f"\nthe HPA reads {METRIC} per pod: {per_pod}", flush=True)
    if job is not None:
        print(f"  and on deployments.apps/{DEPLOYMENT}: {float(job):.0f} samples/s for the job")
    held = [
        c.reason
        for c in decision.conditions
        if (c.type == "AbleToScale" and c.reason.endswith("Stabilized"))
        or (c.type == "ScalingLimited" and c.status)
    ]
    print(
        f"  the HPA in {HPA_FILE.relative_to(REPO_ROOT)} (target {preview.target_per_pod:.0f}"
        f" per pod): the metric asks for {decision.metric_replicas} replicas; it would set"
        f" {decision.desired_replicas} (now {decision.current_replicas})"
        + (f" ({', '.join(held)})" if held else "")
    )
    return True
