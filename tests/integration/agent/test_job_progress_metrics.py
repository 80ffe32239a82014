"""Progress, ETA, the global step and the script's loss on a real agent's /metrics, and the
job's one status beside its world record.

One `edl-agent run --elastic` on a local store trains the elastic digits example (PyTorch,
sample ids), which records its loss with ``et.recorder.scalar("loss", ...)``; the agent
exports what a dashboard shows: how far along the job is, when it will be done, its loss; and
as rank 0 it keeps the status summary (``status.json`` here, the world ConfigMap's
annotations on Kubernetes) that says the same in words.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.digits_job import NUM_TRAIN, SCRIPTS, Job
from tests.support.waiting import wait_for

EPOCHS = 4
GLOBAL_BATCH = 64


def status(job: Job) -> dict[str, str]:
    path = job.store / "digits" / "status.json"
    fields: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    return {k.removeprefix("edl.paddlepaddle.org/"): v for k, v in fields.items()}


def series(job: Job) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(job.metrics("a")):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_progress_eta_and_loss_are_exported_while_training_and_at_the_end(
    tmp_path: Path,
) -> None:
    args = ["--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH), "--seed", "3"]
    # held at its step gate midway: the job cannot end before the checks of a running job
    job = Job(tmp_path, args, step_sleep=0.1, script=SCRIPTS["torch"], allowed_steps=40)
    try:
        job.start("a", on_finished="idle")

        def midway() -> dict[str, float] | None:
            seen = series(job)
            ratio = seen.get("edl_job_progress_ratio", 0.0)
            return seen if 0.0 < ratio and "edl_job_eta_seconds" in seen else None

        seen = wait_for(
            midway,
            timeout_s=400,
            what="progress and an ETA on /metrics",
            interval_s=0.5,
            describe=job.describe,
        )
        ratio, step = seen["edl_job_progress_ratio"], seen["edl_job_global_step"]
        # the share of the planned samples, as the global step says (one step apart at most)
        steps_per_epoch = math.ceil(NUM_TRAIN / GLOBAL_BATCH)
        planned = EPOCHS * steps_per_epoch
        assert abs(ratio - step / planned) <= 1.0 / steps_per_epoch
        assert seen["edl_job_eta_seconds"] > 0
        loss = seen['edl_trainer_scalar{name="loss"}']
        assert math.isfinite(loss) and 0 < loss < 10

        def running() -> dict[str, str] | None:
            now = status(job)
            ok = now.get("phase") == "Running" and now.get("eta", "-") != "-"
            return now if ok else None

        summary = wait_for(running, timeout_s=120, what="a Running status with an ETA")
        assert summary["world-size"] == "1" and summary["failures"] == "0"
        assert summary["progress"].endswith("%") and 0 < int(summary["global-step"]) <= 40
        job.release()

        def finished() -> dict[str, float] | None:
            seen = series(job)
            return seen if seen.get("edl_trainer_job_finished") == 1 else None

        done = wait_for(
            finished,
            timeout_s=400,
            what="the job to finish",
            interval_s=0.5,
            describe=job.describe,
        )
        assert done["edl_job_progress_ratio"] == 1.0 and done["edl_job_eta_seconds"] == 0.0
        assert done["edl_job_global_step"] == planned

        def succeeded() -> dict[str, str] | None:
            now = status(job)
            return now if now.get("phase") == "Succeeded" else None

        final = wait_for(succeeded, timeout_s=60, what="the status to say Succeeded")
        assert final["progress"] == "100.0%" and final["eta"] == "0s"
        assert math.isfinite(done['edl_trainer_scalar{name="loss"}'])
    finally:
        job.stop_all()
