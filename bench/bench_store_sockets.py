"""Sockets an in-process trainer holds over many rescales: listening ones must stay flat.

Three real processes per framework (Paddle, PyTorch) live through `--generations` in-process
generations (default 100) on the production path without agents: each generation's ranks meet
on rank 0's rendezvous port (`agent.trainer.rendezvous`, the master port alternating between
two member ports as a member's does), then the framework's `Collective.init` forms the group
over the fresh store rank 0 holds for it, all-reduces and broadcasts once. Process 0 is rank 0
of every generation; sizes cycle 2, 3, 2, ... with a world of one every tenth generation (no
group: the previous one must still be released). Each process counts, after every generation,
its listening TCP sockets, all its TCP sockets and its threads (psutil); the bench prints them
at a few generations, side by side per process.

Before issue 37 rank 0 gained one listening socket per multi-member generation it hosted (a
store that was never released). Figures are printed, never asserted.

    python bench/bench_store_sockets.py [--generations 100] [--frameworks paddle,torch]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edl_common.ports import Band, free_static_port  # noqa: E402

PROCESS = """
import json, sys, threading, time
import psutil
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.rendezvous import RendezvousHost, meet

framework, me = sys.argv[1], int(sys.argv[2])
ports, plan = json.loads(sys.argv[3]), json.loads(sys.argv[4])
if framework == "paddle":
    from agent.trainer.frameworks.paddle.collective import PaddleCollective as Coll
else:
    from agent.trainer.frameworks.torch.collective import TorchCollective as Coll
coll, hosts, proc = Coll(), {}, psutil.Process()
self_test = coll.self_test("gloo")
if self_test is not None:
    sys.exit("self-test: " + self_test)

def counts():
    tcp = proc.net_connections(kind="tcp")
    return [sum(c.status == psutil.CONN_LISTEN for c in tcp), len(tcp), proc.num_threads()]

print(json.dumps([0, *counts()]), flush=True)
for generation, members in plan:
    if me not in members:
        continue
    rank = members.index(me)
    world = TrainerWorld(rank, len(members), generation, backend="gloo")
    if len(members) > 1:
        master = f"127.0.0.1:{ports[members[0]][generation % 2]}"
        if rank == 0 and master not in hosts:
            hosts[master] = RendezvousHost(master)
        store = meet(master, generation, rank, len(members), 120, lambda: False, hosts.get(master))
        world = TrainerWorld(rank, len(members), generation, master=store, backend="gloo")
    coll.init(world, in_process=True, timeout_seconds=120)
    if len(members) > 1:  # as ElasticTrainer: a world of one runs no collective
        coll.all_reduce_ints([me], ReduceOp.MAX)
        coll.broadcast_bytes(b"state" if rank == 0 else b"", 0)
    print(json.dumps([generation, *counts()]), flush=True)
"""


def plan_of(generations: int) -> list[tuple[int, list[int]]]:
    """Sizes 2, 3, 2, ... with process 0 always rank 0; every tenth generation a world of 1."""
    plan = []
    for g in range(1, generations + 1):
        if g % 10 == 0:
            members = [0]
        else:
            members = [0, 1] if g % 2 else [0, 1, 2]
        plan.append((g, members))
    return plan


def run(framework: str, generations: int) -> dict[int, dict[int, list[int]]]:
    """Per process: generation -> [listening, tcp sockets, threads] after it."""
    chosen: set[int] = set()
    while len(chosen) < 6:
        chosen.add(free_static_port(Band.MEMBER))
    ordered = sorted(chosen)
    ports = json.dumps([ordered[i : i + 2] for i in range(0, 6, 2)])
    plan = json.dumps(plan_of(generations))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, framework, str(me), ports, plan],
            cwd=ROOT,
            env={
                **os.environ,
                "PADDLE_TRAINER_ID": "0",
                "PADDLE_TRAINERS_NUM": "1",
                "GLOG_minloglevel": "2",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(3)
    ]
    out: dict[int, dict[int, list[int]]] = {}
    for me, proc in enumerate(procs):
        stdout, stderr = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(
                f"{framework} process {me} exited {proc.returncode}:\n{stderr[-3000:]}"
            )
        out[me] = {row[0]: row[1:] for row in map(json.loads, stdout.splitlines())}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--frameworks", default="paddle,torch")
    args = parser.parse_args()
    for framework in args.frameworks.split(","):
        started = time.monotonic()
        result = run(framework, args.generations)
        took = time.monotonic() - started
        print(f"\n{framework}: {args.generations} in-process generations ({took:.0f} s)")
        print(
            "  after generation | listening sockets p0 p1 p2 | TCP sockets p0 p1 p2"
            " | threads p0 p1 p2"
        )
        marks = [0, 1, 2, 3, 10, 25, 50, 75, args.generations - 1, args.generations]
        for g in sorted({m for m in marks if 0 <= m <= args.generations}):
            cells = [result[me].get(g) for me in range(3)]

            def column(i: int, cells: list[list[int] | None] = cells) -> str:
                return " ".join(f"{c[i]:>3}" if c else "  -" for c in cells)

            print(f"  {g:>16} | {column(0):>26} | {column(1):>20} | {column(2)}")
        rank0 = result[0]
        listening = [rank0[g][0] for g in sorted(rank0) if g > 0]
        print(
            f"  rank 0 listening sockets over the run: min {min(listening)}, max {max(listening)}"
        )


if __name__ == "__main__":
    main()
