"""Progress, ETA, the global step and the script's loss on a real agent's /metrics.

One `edl-agent run --elastic` on a local store trains the elastic digits example (PyTorch,
sample ids), which records its loss with ``et.recorder.scalar("loss", ...)``; the agent
exports what a dashboard shows: how far along the job is, when it will be done, its loss.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.digits_job import NUM_TRAIN, SCRIPTS, Job, exit_codes
from tests.support.waiting import wait_for

EPOCHS = 4
GLOBAL_BATCH = 64


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
    job = Job(tmp_path, args, step_sleep=0.2, script=SCRIPTS["torch"])
    try:
        job.start("a", on_finished="idle")

        def midway() -> dict[str, float] | None:
            seen = series(job)
            ratio = seen.get("edl_job_progress_ratio", 0.0)
            return seen if 0.0 < ratio < 0.9 and "edl_job_eta_seconds" in seen else None

        seen = wait_for(
            midway,
            timeout_s=400,
            what="progress and an ETA on /metrics",
            interval_s=0.5,
            describe=exit_codes(job.procs),
        )
        ratio, step = seen["edl_job_progress_ratio"], seen["edl_job_global_step"]
        # the share of the planned samples, as the global step says (one step apart at most)
        steps_per_epoch = math.ceil(NUM_TRAIN / GLOBAL_BATCH)
        planned = EPOCHS * steps_per_epoch
        assert abs(ratio - step / planned) <= 1.0 / steps_per_epoch
        assert seen["edl_job_eta_seconds"] > 0
        loss = seen['edl_trainer_scalar{name="loss"}']
        assert math.isfinite(loss) and 0 < loss < 10

        def finished() -> dict[str, float] | None:
            seen = series(job)
            return seen if seen.get("edl_trainer_job_finished") == 1 else None

        done = wait_for(
            finished,
            timeout_s=400,
            what="the job to finish",
            interval_s=0.5,
            describe=exit_codes(job.procs),
        )
        assert done["edl_job_progress_ratio"] == 1.0 and done["edl_job_eta_seconds"] == 0.0
        assert done["edl_job_global_step"] == planned
        assert math.isfinite(done['edl_trainer_scalar{name="loss"}'])
    finally:
        job.stop_all()
