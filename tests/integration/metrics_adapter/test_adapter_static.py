"""The real `edl-adapter` process over TLS, fed by real agent-like endpoints through the static
source, read back with `kubectl get --raw`. Bad scrape targets (hanging, garbage, HTTP 500,
dribbling) are isolated: only their pods lack values.

The processes come from adapter_processes.py, shared with the other adapter tests.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.adapter_processes import (
    CM,
    EXT,
    Adapter,
    Proc,
    spawn,
    start_adapter,
    start_agent,
    value,
)
from tests.support.net import free_port
from tests.support.waiting import wait_for

STALE_AFTER_S = 3
"""The adapter's --stale-after: it serves no sample older than this."""


class _BadTarget(BaseHTTPRequestHandler):
    mode = "garbage"

    def do_GET(self) -> None:
        if self.mode == "hang":
            time.sleep(30)  # the thing under test: a target that never answers
            return
        if self.mode == "status":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"boom")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        if self.mode == "garbage":
            self.wfile.write(b"edl_trainer_samples_total{{{ not exposition \x00\xff\n")
        elif self.mode == "dribble":
            for _ in range(30):
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(0.5)  # the thing under test: a target that dribbles its answer

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def bad_target(mode: str) -> Iterator[int]:
    handler = type(f"Bad{mode}", (_BadTarget,), {"mode": mode})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Setup:
    adapter: Adapter
    agents: dict[str, Proc]
    workdir: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("adapter-static")
    agents: dict[str, Proc] = {}
    with contextlib.ExitStack() as stack:
        pods: list[dict[str, Any]] = []
        for name, rate in (("trainer-0", 100.0), ("trainer-1", 50.0)):
            proc, port = start_agent(workdir, name, rate)
            stack.callback(proc.stop)
            agents[name] = proc
            pods.append({"name": name, "address": f"127.0.0.1:{port}"})
        for mode in ("hang", "garbage", "status", "dribble"):
            port = stack.enter_context(bad_target(mode))
            pods.append({"name": f"trainer-{mode}", "address": f"127.0.0.1:{port}"})
        for p in pods:
            p.update(
                namespace="ml",
                labels={"app": "trainer"},
                deployment="trainer",
                replicaset="trainer-7d9f",
                node="node-1",
            )
        pods.append(
            {
                "namespace": "ml",
                "name": "other-0",
                "labels": {"app": "other"},
                "address": f"127.0.0.1:{free_port()}",
            }
        )  # refused connection
        (workdir / "pods.yaml").write_text(yaml.safe_dump({"pods": pods}))
        adapter = start_adapter(
            workdir,
            "--source",
            "static",
            "--static-file",
            str(workdir / "pods.yaml"),
            "--scrape-interval",
            "500ms",
            "--scrape-timeout",
            "1s",
            "--stale-after",
            f"{STALE_AFTER_S}s",
            "--authentication",
            "none",
            "--authorization",
            "none",
            "--reload-interval",
            "500ms",
        )
        stack.callback(adapter.proc.stop)
        pods_path = (
            f"{CM}/v1beta2/namespaces/ml/pods/*/samples_per_second?labelSelector=app%3Dtrainer"
        )
        wait_for(
            lambda: len(adapter.items(pods_path)) == 2,
            timeout_s=30,
            what="both trainers served",
            interval_s=0.2,
        )
        first = _newest_scrape(adapter.items(pods_path))
        # Eight seconds of rate window (scrapes 8 s apart, 1 s resolution) before the values
        # are judged to 15 %: a stall of the machine shifts a counter by its length against the
        # scrape stamps, which a 3 s window read as 1/3 and an 8 s one reads as 1/8.
        wait_for(
            lambda: _newest_scrape(adapter.items(pods_path)) >= first + 8,
            timeout_s=90,
            what="eight more seconds of scrapes in the rate window",
            interval_s=0.2,
        )
        yield Setup(adapter, agents, workdir)


def _newest_scrape(items: list[dict[str, Any]]) -> int:
    """The newest scrape time the adapter served (unix seconds: `timestamp` has 1 s steps)."""
    return max(calendar.timegm(time.strptime(i["timestamp"], "%Y-%m-%dT%H:%M:%SZ")) for i in items)


def test_pods_metric_values_and_shapes(setup: Setup) -> None:
    a = setup.adapter
    asked = time.time()
    items = a.items(
        f"{CM}/v1beta2/namespaces/ml/pods/%2A/samples_per_second?labelSelector=app%3Dtrainer"
    )
    answered = time.time()
    by_pod = {i["describedObject"]["name"]: i for i in items}
    assert set(by_pod) == {"trainer-0", "trainer-1"}  # bad targets are isolated
    assert value(by_pod["trainer-0"]) == pytest.approx(100.0, rel=0.15)
    assert value(by_pod["trainer-1"]) == pytest.approx(50.0, rel=0.15)
    item = by_pod["trainer-0"]
    assert item["metric"] == {"name": "samples_per_second", "selector": None}
    assert item["windowSeconds"] == 30
    assert item["describedObject"] == {
        "kind": "Pod",
        "namespace": "ml",
        "name": "trainer-0",
        "apiVersion": "v1",
    }
    # The scrape's time, not a fabricated one: no later than the answer, and no older than
    # --stale-after (3 s) before the question, the adapter's own bound on what it serves
    # (the stamp has 1 s steps, so 1 s more); bounds of the adapter's, not of the machine.
    stamp = calendar.timegm(time.strptime(item["timestamp"], "%Y-%m-%dT%H:%M:%SZ"))
    assert asked - STALE_AFTER_S - 1 <= stamp <= answered, (asked, stamp, answered)
    v1 = a.items(f"{CM}/v1beta1/namespaces/ml/pods/trainer-1/step_seconds")
    assert v1[0]["metricName"] == "step_seconds"
    assert v1[0]["selector"] is None
    assert value(v1[0]) == pytest.approx(0.1, rel=0.05)
    ratio = a.items(f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/comm_time_ratio")
    assert value(ratio[0]) == pytest.approx(0.25, rel=0.05)
    gpu = a.items(f"{CM}/v1beta2/namespaces/ml/pods/*/gpu_utilization?metricLabelSelector=gpu%3D0")
    assert [value(i) for i in gpu] == [pytest.approx(0.75)] * 2


def test_object_namespace_and_external_metrics(setup: Setup) -> None:
    a = setup.adapter
    (dep,) = a.items(f"{CM}/v1beta2/namespaces/ml/deployments.apps/trainer/samples_per_second")
    assert dep["describedObject"]["kind"] == "Deployment"
    assert value(dep) == pytest.approx(150.0, rel=0.15)
    (ns,) = a.items(f"{CM}/v1beta1/namespaces/ml/metrics/steps_per_second")
    assert value(ns) == pytest.approx(10.0, rel=0.15)  # mean over the two trainers
    (ext,) = a.items(f"{EXT}/namespaces/ml/busy_accelerators?labelSelector=app%3Dtrainer")
    assert ext["metricLabels"] == {"app": "trainer"}
    assert value(ext) == pytest.approx(2.0)  # (0.75 + 0.25) x 2 pods
    (jobs,) = a.items(f"{EXT}/namespaces/ml/job_samples_per_second?labelSelector=app%3Dtrainer")
    assert value(jobs) == pytest.approx(150.0, rel=0.15)


def test_discovery_and_errors_through_kubectl(setup: Setup) -> None:
    a = setup.adapter
    resources = a.get(f"{CM}/v1beta2")
    assert resources["kind"] == "APIResourceList" and resources["resources"]
    assert a.get(CM)["preferredVersion"]["version"] == "v1beta2"
    assert a.get(EXT)["resources"]
    for path, reason in [
        (f"{CM}/v1beta2/namespaces/ml/pods/*/no_such_metric", "NotFound"),
        (f"{CM}/v1beta2/namespaces/ml/pods/trainer-hang/samples_per_second", "NotFound"),
        (
            f"{CM}/v1beta2/namespaces/ml/pods/*/samples_per_second?labelSelector=app+in+(",
            "BadRequest",
        ),
        (f"{CM}/v1beta2/namespaces/Bad_NS/pods/*/samples_per_second", "BadRequest"),
        ("/openapi/v2", "NotFound"),
    ]:
        out = a.kubectl(path)
        assert out.returncode != 0, path
        assert f"({reason})" in out.stderr, (path, out.stderr)
    raw = requests.post(f"{a.url}{CM}/v1beta2", verify=a.ca, timeout=5)
    assert raw.status_code == 405
    assert raw.json()["reason"] == "MethodNotAllowed"
    protobuf_first = requests.get(
        f"{a.url}{CM}/v1beta2/namespaces/ml/pods/%2A/samples_per_second",
        headers={"Accept": "application/vnd.kubernetes.protobuf, */*"},
        verify=a.ca,
        timeout=5,
    )
    assert protobuf_first.status_code == 200
    assert protobuf_first.headers["Content-Type"] == "application/json"


def test_bad_targets_are_counted_and_a_dead_agent_expires(setup: Setup) -> None:
    a = setup.adapter
    text = requests.get(f"{a.url}/metrics", verify=a.ca, timeout=5).text
    for reason in ("timeout", "parse", "status", "connect"):
        assert f'edl_adapter_scrape_errors_total{{reason="{reason}"}}' in text, reason
    assert 'edl_adapter_request_duration_seconds_count{code="200",route="v1beta2/pods"}' in text
    setup.agents["trainer-1"].stop()  # the trainer's agent dies
    path = f"{CM}/v1beta2/namespaces/ml/pods/*/samples_per_second"
    names = wait_for(
        lambda: (n := [i["describedObject"]["name"] for i in a.items(path)]) == ["trainer-0"] and n,
        timeout_s=60,
        what="trainer-1 to go stale",
        interval_s=0.2,
    )
    assert names == ["trainer-0"]  # the others keep being served


def test_static_file_reload_adds_and_removes_pods(setup: Setup) -> None:
    a = setup.adapter
    pods_file = setup.workdir / "pods.yaml"
    doc = yaml.safe_load(pods_file.read_text())
    doc["pods"] = [p for p in doc["pods"] if p["name"] != "trainer-0"]
    pods_file.write_text(yaml.safe_dump(doc))
    path = f"{CM}/v1beta2/namespaces/ml/pods/trainer-0/samples_per_second"
    wait_for(
        lambda: a.kubectl(path).returncode != 0,
        timeout_s=60,
        what="trainer-0 removed",
        interval_s=0.2,
    )


def test_requestheader_mtls_from_a_front_proxy(tmp_path: Path) -> None:
    from tests.support.pki import issue, make_ca

    ca = make_ca("front-proxy-ca")
    files = {}
    for name, issued in (
        ("proxy", issue(ca, "front-proxy-client")),
        ("intruder", issue(ca, "intruder")),
    ):
        files[name] = (tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
        files[name][0].write_bytes(issued.pem)
        files[name][1].write_bytes(issued.key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    (tmp_path / "pods.yaml").write_text("pods: []\n")
    adapter = start_adapter(
        tmp_path,
        "--static-file",
        str(tmp_path / "pods.yaml"),
        "--authentication",
        "delegated",
        "--authorization",
        "none",
        "--authentication-skip-lookup",
        "--requestheader-client-ca-file",
        str(tmp_path / "ca.crt"),
        "--requestheader-allowed-names",
        "front-proxy-client",
    )
    try:
        url = f"{adapter.url}{CM}/v1beta2"
        headers = {"X-Remote-User": "system:kube-aggregator", "X-Remote-Group": "system:masters"}
        ok = requests.get(
            url,
            headers=headers,
            cert=(str(files["proxy"][0]), str(files["proxy"][1])),
            verify=adapter.ca,
            timeout=5,
        )
        assert ok.status_code == 200
        denied = requests.get(
            url,
            headers=headers,
            cert=(str(files["intruder"][0]), str(files["intruder"][1])),
            verify=adapter.ca,
            timeout=5,
        )
        assert denied.status_code == 401
        assert "cn=intruder is not in the allowed list" in denied.json()["message"]
        assert requests.get(f"{adapter.url}/livez", verify=adapter.ca, timeout=5).status_code == 200
        adapter.extra_kubectl = [
            "--client-certificate",
            str(files["proxy"][0]),
            "--client-key",
            str(files["proxy"][1]),
        ]
        assert adapter.get(f"{CM}/v1beta1")["kind"] == "APIResourceList"
    finally:
        adapter.proc.stop()


AGENT_TRAINER = """
import time
from agent.trainer.session import start_session
session = start_session()
rec = session.recorder
for _ in range(3000):  # bounded: about 5 minutes
    rec.begin_step()
    time.sleep(0.1)  # the step's work
    rec.end_step(samples=32)
session.close()
"""


def test_with_the_real_edl_agent(tmp_path: Path) -> None:
    agent = Path(sys.executable).parent / "edl-agent"
    if not agent.exists():
        pytest.skip("edl-agent is not installed in this venv")
    port = free_port()
    trainer = spawn(
        "edl-agent",
        [
            str(agent),
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--flush-seconds",
            "0.2",
            "--",
            sys.executable,
            "-c",
            AGENT_TRAINER,
        ],
        tmp_path,
    )
    try:
        (tmp_path / "pods.yaml").write_text(
            yaml.safe_dump(
                {
                    "pods": [
                        {
                            "namespace": "ml",
                            "name": "agent-0",
                            "labels": {"app": "trainer"},
                            "deployment": "trainer",
                            "address": f"127.0.0.1:{port}",
                        }
                    ]
                }
            )
        )
        adapter = start_adapter(
            tmp_path,
            "--static-file",
            str(tmp_path / "pods.yaml"),
            "--scrape-interval",
            "500ms",
            "--authentication",
            "none",
            "--authorization",
            "none",
        )
        try:
            path = f"{CM}/v1beta2/namespaces/ml/pods/agent-0/samples_per_second"

            def rate(metric: str = "samples_per_second") -> float:
                out = adapter.kubectl(path.replace("samples_per_second", metric))
                return value(json.loads(out.stdout)["items"][0]) if out.returncode == 0 else 0.0

            # 32 samples per ~0.1 s step: about 300 samples/s once a few reports are in; the
            # first rates rest on two samples and the agent's report flushes, so let the
            # window fill before judging the value.
            wait_for(
                lambda: rate() > 100, timeout_s=60, what="the agent's samples rate", interval_s=0.2
            )

            # However fast the machine lets it step, every step is 32 samples: the two rates
            # the adapter derives from the agent's counters agree (read a moment apart, so
            # allow what the window moved), and the rate settles at no more than one step per
            # 0.1 s sleep. Samples are stamped when scraped and counters move when the trainer
            # flushes, so a reading can overshoot by (lag change) / (window span): on a loaded
            # machine that was 1.56x on a young window (CI). The span grows to the catalogue's
            # 30 s, so the overshoot dies away however slow the machine; a double count stays
            # at 2x on every window and never reads 1.5x or less.
            def consistent() -> tuple[float, float] | None:
                samples, steps = rate(), rate("steps_per_second")
                return (samples, steps) if samples == pytest.approx(32 * steps, rel=0.05) else None

            def settled() -> tuple[float, float] | None:
                seen = consistent()
                return seen if seen is not None and 0 < seen[0] <= 32 / 0.1 * 1.5 else None

            wait_for(
                consistent,
                timeout_s=60,
                what="samples_per_second = 32 x steps_per_second",
                interval_s=0.5,
            )
            wait_for(
                settled,
                timeout_s=90,
                what="a samples rate of at most 1.5 x 320/s",
                interval_s=0.5,
                describe=trainer.tail,
            )
        finally:
            adapter.proc.stop()
    finally:
        trainer.stop()
