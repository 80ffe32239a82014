"""What durable checkpoints cost, and what a job loses when every pod dies.

Part 1, per framework (Paddle, PyTorch with one intra-op thread) and model (the digits
example's MLP, hidden 64, and a wider one, hidden 1024), in one trainer process with the real
`Checkpointer` writing to a local directory (fsync included): the median training step; per
checkpoint, what the training thread waits (the framework's `save_state`, plus a copy of any
array still a view of a tensor), the write on the writer thread (serialisation, SHA-256,
payload, manifest, fsync, rename, prune) and a restore (read, verify, decode, `load_state`);
the stall as a share of step time at every 10 and every 50 steps; and the median step
measured with a checkpoint every 10 steps against none, the two runs interleaved (the writer
thread competes for the GIL and the cores).

Part 2, Paddle, real agents on 127.0.0.1 (a 2-rank job, the example at 0.1 s a step,
checkpoint every 10 steps): every agent and trainer SIGKILLed (a node loss), or every agent
SIGTERMed (a drain), then two new agents: the steps redone, and the time from starting the
new agents to the first step of the resumed job. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PY = sys.executable
MODELS = (64, 1024)
"""Hidden widths: the example's, and one ~250 times its state."""


def median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def measure(framework: str, hidden: int, directory: Path) -> dict[str, Any]:
    """Part 1 for one framework and width, in this process (the framework is imported)."""
    from agent.checkpoints.catalogue import Checkpoints
    from agent.checkpoints.local import LocalDirectory
    from agent.checkpoints.settings import CheckpointSettings
    from agent.checkpoints.stats import CheckpointStats
    from agent.trainer import frameworks
    from agent.trainer.checkpointer import Checkpointer, detached
    from agent.trainer.sampler import ElasticSampler
    from agent.trainer.state import TrainingState
    from examples.digits_data import load_data

    x, y, _, _ = load_data(0)
    collective = frameworks.get(framework).collective()
    if framework == "paddle":
        import paddle
        import paddle.nn.functional as F

        from examples.train_digits import build_model

        paddle.seed(0)
        model = build_model(hidden)
        opt = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())

        def step(idx: Any) -> None:
            loss = F.cross_entropy(model(paddle.to_tensor(x[idx])), paddle.to_tensor(y[idx]))
            loss.backward()
            opt.step()
            opt.clear_grad()

    else:
        import torch
        import torch.nn.functional as TF

        from examples.train_digits_torch import build_model as build_torch

        torch.set_num_threads(1)  # 2 intra-op threads on 2 busy cores: 8x the step time
        torch.manual_seed(0)
        model = build_torch(hidden)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)

        def step(idx: Any) -> None:
            loss = TF.cross_entropy(model(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
            loss.backward()
            opt.step()
            opt.zero_grad()

    sampler = ElasticSampler(len(x), 64, 10_000, 0)
    count = [0]

    def snapshot() -> TrainingState:
        model_state, opt_state = collective.save_state(model, opt)
        return TrainingState(count[0], 1, model_state, opt_state, sampler.state_dict(), {})

    stats = CheckpointStats(None)
    settings = CheckpointSettings(str(directory), every_steps=10, every_seconds=0, keep=3)
    checkpointer = Checkpointer(
        Checkpoints(LocalDirectory(directory)), settings, framework, stats, "bench"
    )

    def run(steps: int, checkpoint: bool) -> list[float]:
        times = []
        for _ in range(steps):
            plan = sampler.plan(0, 1)
            assert plan is not None
            t0 = time.perf_counter()
            step(plan.indices)
            sampler.advance(plan)
            count[0] += 1
            if checkpoint and checkpointer.due(count[0]):
                checkpointer.submit(snapshot)
            times.append(time.perf_counter() - t0)
        checkpointer.wait(60)
        return times

    rounds = 4 if hidden <= 64 else 2
    run(30, False)  # warm-up
    plain: list[float] = []
    with_checkpoints: list[float] = []
    for _ in range(rounds):
        plain += run(100, False)
        with_checkpoints += run(100, True)

    stalls, writes = [], []
    for _ in range(10):
        t0 = time.perf_counter()
        state = detached(snapshot())  # what `submit` does on the training thread
        stalls.append(time.perf_counter() - t0)
        size = len(state.to_bytes())
        before = stats.counts.seconds_sum
        checkpointer.write_now(lambda state=state: state)  # type: ignore[misc]
        writes.append(stats.counts.seconds_sum - before)  # what the writer thread does
        count[0] += 1
    restores = []
    for _ in range(5):
        t0 = time.perf_counter()
        found = checkpointer.newest_after(-1)
        assert found is not None
        collective.load_state(model, opt, found.state.model, found.state.optimizer)
        restores.append(time.perf_counter() - t0)
    step_s = statistics.median(plain)
    stall_s = statistics.median(stalls)
    return {
        "framework": framework,
        "hidden": hidden,
        "state_mb": size / 1e6,
        "step_ms": 1000 * step_s,
        "stall_ms": 1000 * stall_s,
        "write_ms": median_ms(writes),
        "restore_ms": median_ms(restores),
        "pct10": 100 * stall_s / (10 * step_s),
        "pct50": 100 * stall_s / (50 * step_s),
        "step_with_ms": median_ms(with_checkpoints),
        "mean_step_ms": 1000 * statistics.fmean(plain),
        "mean_step_with_ms": 1000 * statistics.fmean(with_checkpoints),
    }


def part1() -> None:
    rows = []
    for framework in ("paddle", "torch"):
        for hidden in MODELS:
            with tempfile.TemporaryDirectory(prefix="edl-bench-ckpt-") as tmp:
                out = subprocess.run(
                    [PY, __file__, "--measure", framework, "--hidden", str(hidden), "--dir", tmp],
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=True,
                )
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("\nPart 1: one checkpoint, in the trainer (median; % = training-thread stall / steps)")
    print(
        "| framework | MLP hidden | state MB | step ms | stall ms | write ms (thread) | "
        "restore ms | every 10 | every 50 | step ms with every 10 (mean: none / every 10) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['framework']} | {r['hidden']} | {r['state_mb']:.2f} | {r['step_ms']:.2f} | "
            f"{r['stall_ms']:.2f} | {r['write_ms']:.1f} | {r['restore_ms']:.1f} | "
            f"{r['pct10']:.1f} % | {r['pct50']:.2f} % | {r['step_with_ms']:.2f} "
            f"({r['mean_step_ms']:.2f} / {r['mean_step_with_ms']:.2f}) |"
        )


PART2_EPOCHS = 8


def part2() -> None:
    print("\nPart 2: every pod of a 2-rank Paddle job gone, two new agents (checkpoint every 10)")
    print(
        "| how the pods went | last step begun | resumed from checkpoint at | steps redone | "
        "new agents started -> first step, s |"
    )
    print("| --- | --- | --- | --- | --- |")
    for how, kill in (("SIGKILL every agent and trainer", True), ("SIGTERM every agent", False)):
        with tempfile.TemporaryDirectory(prefix="edl-bench-ckpt-") as tmp:
            print(f"| {how} | {whole_job_loss(Path(tmp), kill)} |")


def whole_job_loss(tmp: Path, kill: bool) -> str:
    """One row of part 2: the job stopped whole after step 45, resumed by new agents."""
    from agent.trainer.ledger import verify
    from tests.support.digits_job import NUM_TRAIN, Job
    from tests.support.waiting import wait_for

    job = Job(tmp, ["--epochs", str(PART2_EPOCHS), "--seed", "1"], step_sleep=0.1)
    job.extra_env.update(
        EDL_CHECKPOINT_URL=f"{tmp}/volume",
        EDL_CHECKPOINT_EVERY_STEPS="10",
        EDL_CHECKPOINT_EVERY_SECONDS="0",
    )
    try:
        job.start("a")
        job.start("b")
        wait_for(
            lambda: job.world()[1] == 2 and job.steps_done() >= 45,
            timeout_s=300,
            what="a world of 2 past step 45",
            interval_s=0.2,
            describe=job.describe,
        )
        stop(job, kill)
        last, gen = job.steps_done(), job.world()[0]
        job.procs.clear()
        t0 = time.monotonic()
        job.start("c")
        job.start("d")
        wait_for(
            lambda: _stepped_after(job, gen),
            timeout_s=300,
            what="the resumed job",
            interval_s=0.2,
            describe=job.describe,
        )
        resumed_after = time.monotonic() - t0
        wait_for(
            job.result.exists,
            timeout_s=300,
            what="the end of the job",
            interval_s=0.2,
            describe=job.describe,
        )
    finally:
        job.stop_all()
    report = verify(job.ledger)
    problems = report.problems(NUM_TRAIN, PART2_EPOCHS)
    restored = sorted(report.restores[g] for g in report.checkpoints)
    row = f"{last} | {restored} | {report.rolled_back_steps} | {resumed_after:.1f}"
    return row + (f" LEDGER: {'; '.join(problems)}" if problems else "")


def stop(job: Any, kill: bool) -> None:
    import psutil

    trainers = [job.trainer_of(n) for n in job.procs]
    for proc in job.procs.values():
        if kill:
            proc.kill()
        else:
            proc.send_signal(signal.SIGTERM)
    if kill:
        for t in trainers:
            os.killpg(t.pid, signal.SIGKILL)
    for proc in job.procs.values():
        proc.wait(60)
    psutil.wait_procs(trainers, timeout=60)


def _stepped_after(job: Any, generation: int) -> bool:
    """A generation after `generation` has begun a step (its ledger has an intent)."""
    return any(
        int(p.name.split("-g")[1].split("-")[0]) > generation and '"s":' in p.read_text()
        for p in job.ledger.glob("ledger-*.jsonl")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", choices=("paddle", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--hidden", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--skip-agents", action="store_true", help="part 1 only")
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.hidden, args.dir)))
        return 0
    load = os.getloadavg()[0]
    print(f"bench_checkpoint: load average {load:.1f} on {os.cpu_count()} cores")
    part1()
    if not args.skip_agents:
        part2()
    return 0


if __name__ == "__main__":
    sys.exit(main())
