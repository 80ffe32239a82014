"""EDL on a real NVIDIA GPU: NVML, the DDP example on CUDA under edl-agent, a rescale.

Run by bench/gpu_check.sh (which installs what it needs first); on a machine without an
NVIDIA GPU it says so and exits 2. Checks, each printed as ``PASS`` or ``FAIL`` with what it
saw:

1. NVML: the collector the agent runs (`agent.collectors.gpu`) against the real device:
   ``edl_gpu_devices`` >= 1, memory total > 0, utilisation and memory read.
2. A world of one on CUDA with NCCL: one ``edl-agent run --elastic`` training
   `examples.train_digits_ddp_elastic --device cuda` (``EDL_DISTRI_BACKEND=nccl``), to its end:
   its accuracy, and the agent's /metrics while it trains (the GPU's memory in use > 0).
3. Two ranks on the one GPU: first with NCCL (which may refuse two ranks on one device:
   then it says so), else with gloo on CUDA tensors; the world goes 1 -> 2 -> 1 (a join, then
   a SIGTERM): every sample of every epoch exactly once (the sample ledger), the accuracy of
   one process, the rescales recorded.

``--dry-run`` prints the plan and checks nothing (what the unit test runs). Figures are
printed; the exit status is 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from agent.trainer.ledger import verify  # noqa: E402
from tests.support.digits_job import NUM_TRAIN, SCRIPTS, Job, reference_accuracy  # noqa: E402
from tests.support.waiting import WaitTimeout, wait_for  # noqa: E402

EPOCHS = 3
TRAIN_ARGS = ["--epochs", str(EPOCHS), "--global-batch", "64", "--seed", "3", "--device", "cuda"]
PLAN = (
    "1. NVML: agent.collectors.gpu against the real device (edl_gpu_devices >= 1, memory total)",
    "2. world of one, NCCL: edl-agent run --elastic (EDL_DISTRI_BACKEND=nccl) -- python -m "
    "examples.train_digits_ddp_elastic --device cuda; accuracy and /metrics while training",
    "3. two ranks on the one GPU: NCCL first (it may refuse two ranks on one device), else "
    "gloo on CUDA tensors; world 1 -> 2 -> 1 (join, SIGTERM); ledger exactly-once, accuracy",
)


class Checks:
    """What was verified, in order, and whether all of it passed."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = False

    def check(self, ok: bool, what: str) -> bool:
        line = f"{'PASS' if ok else 'FAIL'}  {what}"
        print(line, flush=True)
        self.lines.append(line)
        self.failed = self.failed or not ok
        return ok


def has_gpu() -> str:
    """The GPUs `nvidia-smi -L` lists ("" without a GPU or a driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ""
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else ""


def nvml(checks: Checks) -> None:
    from agent.collectors.gpu import GpuCollector, open_nvml
    from agent.collectors.health import CollectorHealth

    handle, note = open_nvml()
    if not checks.check(handle is not None, f"NVML opens: {note}"):
        return
    samples = {
        (s.name, s.labels.get("gpu", "")): s.value
        for family in GpuCollector(handle, CollectorHealth()).collect()
        for s in family.samples
    }
    devices = samples.get(("edl_gpu_devices", ""), 0)
    checks.check(devices >= 1, f"edl_gpu_devices = {devices:.0f}")
    total = samples.get(("edl_gpu_memory_total_bytes", "0"), 0)
    checks.check(total > 0, f"GPU 0 memory total {total / 2**30:.1f} GiB")
    used = samples.get(("edl_gpu_memory_used_bytes", "0"))
    util = samples.get(("edl_gpu_utilization_ratio", "0"))
    checks.check(
        used is not None and util is not None, f"GPU 0 memory used {used} B, utilisation {util}"
    )
    handle.nvmlShutdown()  # type: ignore[union-attr]


def metric(job: Job, name: str, series: str) -> float | None:
    """One series of agent `name`'s /metrics (None when absent or unreachable)."""
    try:
        text = job.metrics(name)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def world_of_one(checks: Checks, tmp: Path) -> None:
    job = Job(tmp, TRAIN_ARGS, step_sleep=0.0, script=SCRIPTS["torch-ddp"])
    job.extra_env.update({"EDL_DISTRI_BACKEND": "nccl", "EDL_REINIT": "process"})
    seen: list[float] = []
    try:
        job.start("a")

        def training_seen() -> bool:
            used = metric(job, "a", 'edl_gpu_memory_used_bytes{gpu="0"}')
            if used is not None and job.steps_done() >= 0:
                seen.append(used)
            return job.procs["a"].poll() is not None

        wait_for(training_seen, timeout_s=1800, what="the NCCL world of one to finish")
    except WaitTimeout as e:
        checks.check(False, f"world of one with NCCL: {e}")
        return
    finally:
        job.stop_all()
    checks.check(job.procs["a"].returncode == 0, f"agent exit {job.procs['a'].returncode}")
    if not checks.check(job.result.exists(), "the job wrote its result"):
        print(tail(tmp / "a.log"))
        return
    final = json.loads(job.result.read_text())
    checks.check(final["accuracy"] > 0.9, f"accuracy {final['accuracy']:.4f} on CUDA with NCCL")
    checks.check(bool(seen) and max(seen) > 0, f"GPU memory in use while training: {seen[-3:]}")
    report = verify(job.ledger)
    checks.check(report.problems(NUM_TRAIN, EPOCHS) == [], "every sample once per epoch")


def two_ranks(checks: Checks, tmp: Path, backend: str) -> bool | None:
    """World 1 -> 2 -> 1 on one GPU; None when the world of two never trained (NCCL refused)."""
    job = Job(tmp, TRAIN_ARGS, step_sleep=0.05, script=SCRIPTS["torch-ddp"], allowed_steps=0)
    job.extra_env.update({"EDL_DISTRI_BACKEND": backend, "EDL_REINIT": "auto"})
    try:
        job.start("a")
        wait_for(lambda: job.trained(1, 5), timeout_s=900, what="world of 1 training")
        job.start("b")
        try:
            wait_for(lambda: job.trained(2, 10), timeout_s=300, what=f"world of 2 ({backend})")
        except WaitTimeout as e:
            print(f"       {backend}: {e}\n{tail(tmp / 'b.log')}")
            return None
        job.procs["b"].send_signal(signal.SIGTERM)
        job.procs["b"].wait(300)
        wait_for(lambda: job.trained(1, 3), timeout_s=900, what="world of 1 again")
        job.release()
        wait_for(lambda: job.procs["a"].poll() is not None, timeout_s=1800, what="the end")
    except WaitTimeout as e:
        checks.check(False, f"{backend}: {e}")
        print(tail(tmp / "a.log"))
        return False
    finally:
        job.stop_all()
    final = json.loads(job.result.read_text())
    report = verify(job.ledger)
    checks.check(report.problems(NUM_TRAIN, EPOCHS) == [], f"{backend}: every sample once")
    reference = reference_accuracy(tmp, TRAIN_ARGS, SCRIPTS["torch-ddp"])
    checks.check(
        abs(final["accuracy"] - reference) <= 0.01,
        f"{backend}: accuracy {final['accuracy']:.4f}, one process {reference:.4f}",
    )
    rescales = metric(job, "a", "edl_trainer_rescales_total")
    modes = sorted({t.reinit for t in job.timings()})
    checks.check(True, f"{backend}: rescales recorded by a: {rescales}; re-init {modes}")
    return True


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the plan, check nothing")
    args = parser.parse_args()
    if args.dry_run:
        print("gpu_check plan (dry run: nothing is checked):")
        print("\n".join(f"  {step}" for step in PLAN))
        return 0
    gpus = has_gpu()
    if not gpus:
        print("gpu_check: no NVIDIA GPU here (nvidia-smi -L lists none): nothing checked")
        return 2
    print(f"gpu_check on: {gpus}")
    checks = Checks()
    steps: list[tuple[str, Callable[[Path], None]]] = [
        ("NVML", lambda _: nvml(checks)),
        ("world of one, NCCL", lambda tmp: world_of_one(checks, tmp / "one")),
    ]
    with tempfile.TemporaryDirectory(prefix="edl-gpu-check-") as tmp:
        for title, step in steps:
            print(f"\n== {title}", flush=True)
            step(Path(tmp))
        print("\n== two ranks on one GPU", flush=True)
        started = time.monotonic()
        if two_ranks(checks, Path(tmp) / "nccl", "nccl") is None:
            spent = time.monotonic() - started
            checks.check(True, f"NCCL refused two ranks on one GPU ({spent:.0f} s): gloo instead")
            gloo = two_ranks(checks, Path(tmp) / "gloo", "gloo")
            checks.check(gloo is not None, "gloo trained two ranks on one GPU")
    print("\n== verified" if not checks.failed else "\n== FAILED")
    print("\n".join(checks.lines))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
