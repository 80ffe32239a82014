"""The shipped alert rules in a real Prometheus (Debian package) over two real `edl-agent`
processes: a job whose trainer stops stepping fires EDLTrainingStalled, a healthy job in the
same namespace does not. Only the alert's `for` is shortened (10m -> 5s); its expression, and
the recording rules it reads, are the shipped ones."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import yaml

from tests.support.adapter_processes import (
    spawn,
)
from tests.support.dashboards import queries, series_in
from tests.support.monitoring import write_rule_file
from tests.support.net import free_port
from tests.support.waiting import wait_for

PROMETHEUS = shutil.which("prometheus")
STALL_AFTER_STEPS = 20
STALL_SECONDS = 60  # the alert's threshold: no step for over a minute

# A trainer on the agent's training API: steps every 50 ms, or, with a step budget, stops
# stepping after it while staying alive (as a rank in a hung collective does). Bounded.
TRAINER = r"""
import sys, time
from agent.trainer.session import start_session
budget = int(sys.argv[1])
rec = start_session().recorder
step, deadline = 0, time.monotonic() + 600
while time.monotonic() < deadline:
    if budget and step >= budget:
        time.sleep(0.5)  # the thing under test: alive but no longer stepping
        continue
    rec.begin_step()
    time.sleep(0.05)  # the step's work
    rec.end_step(samples=32)
    rec.scalar("loss", 1.0 / (step + 1))  # what the dashboard's Loss panel reads
    step += 1
"""


@dataclass
class Cluster:
    url: str

    def query(self, promql: str) -> list[dict[str, Any]]:
        body = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def alerts(self, name: str) -> list[dict[str, Any]]:
        body = requests.get(f"{self.url}/api/v1/alerts", timeout=5).json()
        return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == name]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if PROMETHEUS is None:
        pytest.skip("the prometheus binary is absent (make system-deps installs it)")
    workdir = tmp_path_factory.mktemp("alerts-prometheus")
    (workdir / "trainer.py").write_text(TRAINER)
    with contextlib.ExitStack() as stack:
        scrape_configs = []
        for job, budget in (("healthy", 0), ("stalled", STALL_AFTER_STEPS)):
            port = free_port()
            agent = spawn(
                f"agent-{job}",
                [
                    *(sys.executable, "-m", "agent", "run", "--host", "127.0.0.1"),
                    *("--port", str(port), "--flush-seconds", "0.2"),
                    *("--metrics-dir", str(workdir / f"metrics-{job}")),
                    *("--", sys.executable, str(workdir / "trainer.py"), str(budget)),
                ],
                workdir,
            )
            stack.callback(agent.stop)
            # What the PodMonitor gives a trainer pod: job = its edl.paddlepaddle.org/job label.
            labels = {"namespace": "ml", "pod": f"{job}-0", "deployment": f"{job}-trainer"}
            scrape_configs.append(
                {
                    "job_name": job,
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": labels}],
                }
            )
        rules = write_rule_file(workdir / "edl-rules.yaml", {"EDLTrainingStalled": "5s"})
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "900ms",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(rules)],
            "scrape_configs": scrape_configs,
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
        url = f"http://127.0.0.1:{prom_port}"
        wait_for(
            lambda: requests.get(f"{url}/-/ready", timeout=1).ok,
            timeout_s=60,
            what="prometheus ready",
            interval_s=0.2,
        )
        yield Cluster(url)


def _by_job(result: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"]["job"]: float(r["value"][1]) for r in result}


def test_a_stalled_trainer_fires_training_stalled_and_a_healthy_one_does_not(
    prometheus: Cluster,
) -> None:
    newest = "namespace_job:edl_trainer_last_step_timestamp_seconds:max"
    # Both jobs' trainers run and have stepped: the recording rules see them.
    wait_for(
        lambda: (
            set(_by_job(prometheus.query(newest))) == {"healthy", "stalled"}
            and _by_job(prometheus.query("namespace_job:edl_trainer_up:sum"))
            == {"healthy": 1.0, "stalled": 1.0}
        ),
        timeout_s=120,
        what="both jobs recorded",
        interval_s=0.5,
    )
    # Quiet while the stalled job's last step is younger than the threshold.
    ages = _by_job(prometheus.query(f"time() - {newest}"))
    if ages["stalled"] < STALL_SECONDS - 5:
        assert prometheus.alerts("EDLTrainingStalled") == []

    (alert,) = wait_for(
        lambda: [a for a in prometheus.alerts("EDLTrainingStalled") if a["state"] == "firing"],
        timeout_s=STALL_SECONDS + 120,
        what="EDLTrainingStalled firing",
        interval_s=1.0,
    )
    assert alert["labels"]["job"] == "stalled"
    assert alert["labels"]["namespace"] == "ml"
    assert alert["labels"]["severity"] == "warning"
    assert float(alert["value"]) > STALL_SECONDS
    assert "No pod of job stalled in namespace ml" in alert["annotations"]["description"]
    # The healthy job is evaluated by the same rule, and keeps stepping; the stalled one
    # stopped at its budget. Shown by counts, not by how fast either ran.
    assert [a["labels"]["job"] for a in prometheus.alerts("EDLTrainingStalled")] == ["stalled"]
    steps = "sum by (job) (edl_trainer_steps_total)"
    healthy_then = _by_job(prometheus.query(steps))["healthy"]
    wait_for(
        lambda: _by_job(prometheus.query(steps))["healthy"] > healthy_then,
        timeout_s=120,
        what="the healthy job stepping on after the alert fired",
        interval_s=1.0,
    )
    assert _by_job(prometheus.query(steps))["stalled"] == STALL_AFTER_STEPS
    assert [a["labels"]["job"] for a in prometheus.alerts("EDLTrainingStalled")] == ["stalled"]


def test_the_training_dashboard_queries_evaluate_on_the_agents_series(
    prometheus: Cluster,
) -> None:
    # Evaluated, not only parsed: a bad join (many-to-many) fails only here. Panels that read
    # nothing but the agent's series have data for the healthy job; the rest (kube-state-
    # metrics, the sizer) are empty without those exporters, but still valid.
    wait_for(
        lambda: _by_job(prometheus.query("namespace_job:edl_trainer_steps:rate2m"))["healthy"] > 1,
        timeout_s=120,
        what="a step rate for the healthy job",
        interval_s=1.0,
    )
    checked = 0
    for query in queries():
        if query.dashboard != "edl-training-job.json" or query.panel.startswith("variable"):
            continue
        expr = query.as_promql().replace('job=~".*"', 'job=~"healthy"')
        result = prometheus.query(expr)  # asserts status success
        reads = series_in(query.expr)
        if reads and all(n.startswith("edl_trainer_") for n in reads) and "gpu" not in expr:
            if "rescale" in expr or "restarts" in expr or query.panel.startswith("annotation"):
                continue  # no world change and no restart happened: empty is right
            assert result, f"{query.panel}: no data for the healthy job"
            checked += 1
    assert checked >= 10
