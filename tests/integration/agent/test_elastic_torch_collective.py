"""Three real processes re-form one torch gloo group in-process through five generations.

What `TorchCollective.init` promises, without agents: each generation destroys the previous
group and forms a fresh one over a fresh store (ports alternate, so a port comes back two
generations later), rank 0 may move to another process, and the small collectives of the
elastic protocol (all-reduce of ints, broadcast of a state blob) give the right answers in
every generation. As with agents, every process has its own two ports and the master of a
generation is its rank 0's port of that generation's parity.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.frameworks import needs
from tests.support.net import free_port

pytestmark = needs("torch")  # its processes import torch; collecting does not

ROOT = Path(__file__).resolve().parents[3]

RUN_BOUND_SECONDS = 600.0
"""How long the three processes may take in all: a bound on a hang, not a speed (each imports
torch, ~3 s idle; a generation waits for a peer still importing; beside heavy work on 2
cores the run took over 150 s)."""
INIT_TIMEOUT = 300
"""Each generation's group formation, bounded like the run (a peer may still be importing)."""

PROCESS = (
    f"INIT_TIMEOUT = {INIT_TIMEOUT}\n"
    + """
import json, sys
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.frameworks.torch.collective import TorchCollective

me, ports, plan = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
coll = TorchCollective()
for generation, members in plan:
    if me not in members:
        continue
    rank = members.index(me)
    master = f"127.0.0.1:{ports[members[0]][generation % 2]}"
    coll.init(TrainerWorld(rank, len(members), generation, master=master, backend="gloo"),
              in_process=True, timeout_seconds=INIT_TIMEOUT)
    total = coll.all_reduce_ints([me + 1], ReduceOp.MAX)
    low = coll.all_reduce_ints([me], ReduceOp.MIN)
    blob = coll.broadcast_bytes(f"state of g{generation}".encode() if rank == 0 else b"", 0)
    print(json.dumps([generation, rank, total[0], low[0], blob.decode()]), flush=True)
coll.init(TrainerWorld(), in_process=True, timeout_seconds=INIT_TIMEOUT)  # leaves the last group
"""
)


@pytest.mark.slow
@pytest.mark.timeout(RUN_BOUND_SECONDS + 60)
def test_one_process_group_per_generation_across_sizes_and_a_moving_rank_0() -> None:
    plan = [(1, [0, 1]), (2, [0, 1, 2]), (3, [0, 2]), (4, [2, 0]), (5, [2, 0, 1])]
    ports = json.dumps([[free_port(), free_port()] for _ in range(3)])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, str(me), ports, json.dumps(plan)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(3)
    ]
    deadline = time.monotonic() + RUN_BOUND_SECONDS
    ended = []
    try:
        for proc in procs:
            ended.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        tails = [proc.communicate()[1][-1500:] for proc in procs[len(ended) :]]
        pytest.fail(f"not done within {RUN_BOUND_SECONDS:.0f} s; stderr tails: {tails}")
    outputs = []
    for proc, (out, err) in zip(procs, ended, strict=True):
        assert proc.returncode == 0, err[-2000:]
        outputs.append([json.loads(line) for line in out.splitlines()])
    for me, lines in enumerate(outputs):
        expected = [
            [gen, members.index(me), max(members) + 1, min(members), f"state of g{gen}"]
            for gen, members in plan
            if me in members
        ]
        assert lines == expected
