"""`--source prometheus`: a real Prometheus (Debian package) scrapes agent-like endpoints on
loopback; the adapter reads them with instant queries and serves the same API metrics."""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
from collections.abc import Iterator

import pytest
import requests
import yaml

from tests.support.adapter_processes import (
    CM,
    EXT,
    Adapter,
    spawn,
    start_adapter,
    start_agent,
    value,
)
from tests.support.net import free_port
from tests.support.waiting import wait_for

PROMETHEUS = shutil.which("prometheus")


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Adapter]:
    if PROMETHEUS is None:
        pytest.skip(
            "the prometheus binary is absent (bash scripts/install-system-deps.sh installs it)"
        )
    workdir = tmp_path_factory.mktemp("adapter-prometheus")
    with contextlib.ExitStack() as stack:
        targets = []
        for name, rate in (("trainer-0", 100.0), ("trainer-1", 50.0)):
            proc, port = start_agent(workdir, name, rate)
            stack.callback(proc.stop)
            labels = {"namespace": "ml", "pod": name, "app": "trainer", "deployment": "trainer"}
            targets.append({"targets": [f"127.0.0.1:{port}"], "labels": labels})
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [{"job_name": "edl-agents", "static_configs": targets}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_port = free_port()
        prom = spawn(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            workdir,
        )
        stack.callback(prom.stop)
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_for(
            lambda: requests.get(f"{prom_url}/-/ready", timeout=1).ok,
            timeout_s=60,
            what="prometheus ready",
            interval_s=0.2,
        )
        adapter = start_adapter(
            workdir,
            "--source",
            "prometheus",
            "--prometheus-url",
            prom_url,
            "--scrape-interval",
            "1s",
            "--authentication",
            "none",
            "--authorization",
            "none",
        )
        stack.callback(adapter.proc.stop)
        path = f"{CM}/v1beta2/namespaces/ml/pods/*/samples_per_second?labelSelector=app%3Dtrainer"
        wait_for(
            lambda: len(adapter.items(path)) == 2,
            timeout_s=60,
            what="both trainers through Prometheus",
            interval_s=0.5,
        )
        # Rates within 20 % need a span of samples, not the first two: Prometheus stamps a
        # sample with the scrape's start, so on a loaded machine one late answer skews a
        # 2-3 s span by a quarter (seen: 124 samples/s for 100). Wait until the adapter holds
        # 8 s of samples of both (the newest sample behind each item 8 s past the first).
        first = min(_seconds(i["timestamp"]) for i in adapter.items(path))
        wait_for(
            lambda: all(_seconds(i["timestamp"]) >= first + 8 for i in adapter.items(path)),
            timeout_s=90,
            what="8 s of samples in the adapter",
            interval_s=0.5,
        )
        yield adapter


def _seconds(rfc3339: str) -> float:
    return dt.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def test_pods_metrics_through_prometheus(adapter: Adapter) -> None:
    items = adapter.items(
        f"{CM}/v1beta2/namespaces/ml/pods/%2A/samples_per_second?labelSelector=app%3Dtrainer"
    )
    by_pod = {i["describedObject"]["name"]: value(i) for i in items}
    assert by_pod == {
        "trainer-0": pytest.approx(100.0, rel=0.2),
        "trainer-1": pytest.approx(50.0, rel=0.2),
    }
    (step,) = adapter.items(f"{CM}/v1beta1/namespaces/ml/pods/trainer-0/step_seconds")
    assert value(step) == pytest.approx(0.1, rel=0.1)


def test_object_and_external_metrics_through_prometheus(adapter: Adapter) -> None:
    (dep,) = adapter.items(
        f"{CM}/v1beta2/namespaces/ml/deployments.apps/trainer/samples_per_second"
    )
    assert value(dep) == pytest.approx(150.0, rel=0.2)
    (ext,) = adapter.items(
        f"{EXT}/namespaces/ml/busy_accelerators?labelSelector=deployment%3Dtrainer"
    )
    assert value(ext) == pytest.approx(2.0)
    missing = adapter.kubectl(
        f"{CM}/v1beta2/namespaces/ml/deployments.apps/nobody/samples_per_second"
    )
    assert missing.returncode != 0 and "(NotFound)" in missing.stderr
