"""Elastic DDP against plain DDP and against the explicit all-reduce: throughput and rescale pause.

Three versions of the digits MLP, made ~25M parameters (``--hidden 5000``) so that the
gradient all-reduce matters, trained on CPU over gloo with a global batch of 64:

- ``plain DDP``: `examples.train_digits_ddp` under ``torchrun --standalone`` (a DataLoader with a
  DistributedSampler, ``DistributedDataParallel``, batch 64 / world per rank);
- ``elastic DDP``: `examples.train_digits_ddp_elastic` under one `edl-agent run --elastic` per
  rank, the world held at its size (``--min``): `ElasticDataLoader`, `ElasticDataParallel`;
- ``explicit all-reduce``: `examples.train_digits_torch_elastic` under the same agents (sample
  ids, a summed loss, `et.all_reduce_gradients()` after backward: no overlap).

Part 1, a fixed world of 2 and of 4 ranks, without and with two DataLoader workers per rank:
steps/s over the whole training (the scripts' own ``train_seconds``: the first step's set-up and,
for EDL, the start's state broadcast included) and, for EDL, over its steady state (the sample
ledger's step starts, the first step left out), with each figure's ratio to plain DDP's. Each
version runs `--repeats` times, the versions interleaved (every repetition in a rotated order,
so the machine's drift spreads over all of them); the medians are compared and every run's
figure is printed; *paired* is the median of each repetition's own ratio (a version against
the plain DDP run of the same repetition, minutes apart). ``--baseline TREE`` (repeatable) adds
a row ``elastic @NAME``: the same elastic script run from another source tree (``git archive
main | tar -x -C /tmp/main``, or a copy with one change), interleaved with the others, so a
change is measured before and after in one run on the same machine state.

Part 2, the pause of a rescale (2 -> 3 by a joiner, 3 -> 2 by a SIGTERM), `--rounds` times,
in-process: the pause the surviving agent recorded (`edl_trainer_rescale_pause_seconds`) and
its phases, elastic DDP (DDP dropped and rebuilt on the new group, the DataLoader re-planned)
beside the explicit all-reduce; ratio of the medians.

Figures and ratios are printed side by side from one run, never asserted. On a shared
machine, say its load (`uptime`) beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.bench_rescale import PHASES, Agents, ups_and_downs  # noqa: E402
from tests.support.digits_job import NUM_TRAIN  # noqa: E402
from tests.support.pause_monitor import step_starts  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

PY = sys.executable
GLOBAL_BATCH = 64
STEPS_PER_EPOCH = -(-NUM_TRAIN // GLOBAL_BATCH)
PLAIN = "examples.train_digits_ddp"
ELASTIC = "examples.train_digits_ddp_elastic"
EXPLICIT = "examples.train_digits_torch_elastic"


def plain_ddp(tmp: Path, world: int, hidden: int, epochs: int, workers: int) -> dict[str, float]:
    """torchrun, `world` processes on this machine: steps/s of rank 0's training."""
    result = tmp / "result.json"
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world),
           "-m", PLAIN, "--hidden", str(hidden), "--epochs", str(epochs),
           "--batch-size", str(GLOBAL_BATCH // world), "--workers", str(workers),
           "--result", str(result)]  # fmt: skip
    tmp.mkdir(parents=True, exist_ok=True)
    with open(tmp / "torchrun.log", "wb") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=log, check=True, timeout=3600)
    seconds = float(json.loads(result.read_text())["train_seconds"])
    return {"steps/s": epochs * STEPS_PER_EPOCH / seconds}


def steady(ledger: Path) -> float | None:
    """Steps/s of the busiest world's rank 0 from its ledger, the first step left out."""
    best: list[float] = []
    for (_member, _gen), times in step_starts(ledger).items():
        if len(times) > len(best):
            best = times
    if len(best) < 3:
        return None
    return (len(best) - 2) / (best[-1] - best[1])


def elastic(
    tmp: Path,
    script: str,
    world: int,
    hidden: int,
    epochs: int,
    workers: int | None,
    root: Path = ROOT,
) -> dict[str, float]:
    """`world` agents, the job trained only in a world of all of them; rank 0's figures.

    `root`: the source tree they run (`--baseline`: the same script from another commit).
    """
    result = tmp / "result.json"
    extra = ["--hidden", str(hidden), "--global-batch", str(GLOBAL_BATCH), "--result", str(result)]
    if workers is not None:
        extra += ["--workers", str(workers)]
    agents = Agents(
        tmp,
        1.0,
        "auto",
        script,
        tuple(extra),
        min_world=world,
        epochs=epochs,
        step_sleep=0.0,
        root=root,
    )
    try:
        for rank in range(world):
            agents.start(f"m{rank}")
        wait_for(result.exists, timeout_s=3600, what="the job's result", interval_s=0.5)
        time.sleep(0.5)  # the result file is written whole, then read
        seconds = float(json.loads(result.read_text())["train_seconds"])
    finally:
        agents.stop()
    out = {"steps/s": epochs * STEPS_PER_EPOCH / seconds}
    rate = steady(tmp / "ledger")
    if rate is not None:
        out["steady steps/s"] = rate
    return out


def fixed_worlds(tmp: Path, args: argparse.Namespace) -> None:
    print(f"\n== fixed world, {args.hidden} hidden units (~{params(args.hidden) / 1e6:.1f}M "
          f"parameters), global batch {GLOBAL_BATCH}, {args.epochs} epochs of "
          f"{STEPS_PER_EPOCH} steps; median of {args.repeats} runs per version, the versions "
          "interleaved (each repetition in a rotated order)")  # fmt: skip
    print(f"{'world':>5} {'workers':>7}  {'version':<20} {'steps/s':>8} {'ratio':>6} "
          f"{'steady':>8} {'ratio':>6} {'paired':>6}  runs (steps/s)")  # fmt: skip
    for world in args.worlds:
        for workers in args.workers:
            where = tmp / f"w{world}-k{workers}"
            versions = fixed_world_versions(world, workers, args)
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
            names = list(versions)
            for rep in range(args.repeats):
                order = names[rep % len(names) :] + names[: rep % len(names)]
                for name in order:
                    runs[name].append(versions[name](where / f"{name.replace(' ', '-')}-{rep}"))
            plain = statistics.median(r["steps/s"] for r in runs["plain DDP"])
            for name in names:
                rate = statistics.median(r["steps/s"] for r in runs[name])
                line = f"{world:>5} {workers:>7}  {name:<20} {rate:>8.3f} {rate / plain:>6.2f}"
                steadies = [r["steady steps/s"] for r in runs[name] if "steady steps/s" in r]
                if steadies:
                    steady_rate = statistics.median(steadies)
                    line += f" {steady_rate:>8.3f} {steady_rate / plain:>6.2f}"
                else:
                    line += f" {'':>8} {'':>6}"
                paired = statistics.median(
                    r["steps/s"] / p["steps/s"]
                    for r, p in zip(runs[name], runs["plain DDP"], strict=True)
                )
                line += f" {paired:>6.2f}  " + " ".join(f"{r['steps/s']:.3f}" for r in runs[name])
                print(line, flush=True)


def fixed_world_versions(
    world: int, workers: int, args: argparse.Namespace
) -> dict[str, Callable[[Path], dict[str, float]]]:
    """The versions compared at one world and DataLoader worker count, by name."""
    hidden, epochs = args.hidden, args.epochs
    versions: dict[str, Callable[[Path], dict[str, float]]] = {
        "plain DDP": lambda d: plain_ddp(d, world, hidden, epochs, workers),
        "elastic DDP": lambda d: elastic(d, ELASTIC, world, hidden, epochs, workers),
    }
    for tree in args.baseline:
        versions[f"elastic @{tree.name}"[:20]] = partial(
            elastic, script=ELASTIC, world=world, hidden=hidden, epochs=epochs, workers=workers,
            root=tree,
        )  # fmt: skip
    if workers == 0 and args.explicit:  # the sample-id example has no DataLoader
        versions["explicit all-reduce"] = lambda d: elastic(
            d, EXPLICIT, world, hidden, epochs, None
        )
    return versions


def params(hidden: int) -> int:
    """Parameters of the digits MLP (64 -> hidden -> hidden -> 10)."""
    return 64 * hidden + hidden + hidden * hidden + hidden + hidden * 10 + 10


def pauses(
    tmp: Path, script: str, rounds: int, extra: tuple[str, ...]
) -> list[tuple[str, dict[str, float]]]:
    """Rescales 2 -> 3 (a joiner) and 3 -> 2 (its SIGTERM), `rounds` times, in-process."""
    agents = Agents(tmp, 1.0, "auto", script, extra, step_sleep=0.0)
    try:
        agents.start_training(("a", "b"), timeout_s=900)
        return ups_and_downs(agents, rounds, leave_wait_s=120)
    finally:
        agents.stop()


def rescale(tmp: Path, args: argparse.Namespace) -> None:
    hidden = ("--hidden", str(args.pause_hidden), "--global-batch", str(GLOBAL_BATCH))
    setups = {
        "elastic DDP": pauses(tmp / "ddp", ELASTIC, args.rounds, (*hidden, "--workers", "2")),
        "explicit all-reduce": pauses(tmp / "explicit", EXPLICIT, args.rounds, hidden),
    }
    print(f"\n== rescale pause, in-process, {args.pause_hidden} hidden units "
          f"(~{params(args.pause_hidden) / 1e6:.1f}M parameters), {args.rounds} rounds; "
          "median seconds")  # fmt: skip
    print(f"{'event':<18} {'version':<20} {'pause':>7} " + " ".join(f"{p:>10}" for p in PHASES))
    for event in ("up 2->3", "down 3->2 SIGTERM"):
        medians = {}
        for name, rows in setups.items():
            got = [row for kind, row in rows if kind == event]
            medians[name] = {k: statistics.median(r[k] for r in got) for k in ("pause", *PHASES)}
            cols = " ".join(f"{medians[name][p]:>10.3f}" for p in PHASES)
            print(f"{event:<18} {name:<20} {medians[name]['pause']:>7.3f} {cols}")
        ratio = medians["elastic DDP"]["pause"] / medians["explicit all-reduce"]["pause"]
        print(f"{event:<18} {'ratio DDP / explicit':<20} {ratio:>7.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[0, 2])
    parser.add_argument("--hidden", type=int, default=5000, help="5000: ~25M parameters")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="runs per version (medians)")
    parser.add_argument(
        "--no-explicit", dest="explicit", action="store_false",
        help="leave the explicit all-reduce out",
    )  # fmt: skip
    parser.add_argument(
        "--baseline", type=Path, action="append", default=[], metavar="TREE",
        help="also run elastic DDP from this source tree, a row `elastic @TREE-NAME` (e.g. "
        "`git archive main` unpacked): before/after pairs in one interleaved run; repeatable",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="rescale rounds (0: none)")
    parser.add_argument("--pause-hidden", type=int, default=5000)
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"bench_ddp: {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    with tempfile.TemporaryDirectory(prefix="edl-bench-ddp-") as tmp:
        if not args.skip_throughput:
            fixed_worlds(Path(tmp), args)
        if args.rounds:
            rescale(Path(tmp), args)
    load = os.getloadavg()
    print(f"\nload at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
