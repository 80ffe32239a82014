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
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]

PROCESS = """
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
              in_process=True, timeout_seconds=60)
    total = coll.all_reduce_ints([me + 1], ReduceOp.MAX)
    low = coll.all_reduce_ints([me], ReduceOp.MIN)
    blob = coll.broadcast_bytes(f"state of g{generation}".encode() if rank == 0 else b"", 0)
    print(json.dumps([generation, rank, total[0], low[0], blob.decode()]), flush=True)
coll.init(TrainerWorld(), in_process=True, timeout_seconds=60)  # leaves the last group
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.timeout(180)
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
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, err[-2000:]
        outputs.append([json.loads(line) for line in out.splitlines()])
    for me, lines in enumerate(outputs):
        expected = [
            [gen, members.index(me), max(members) + 1, min(members), f"state of g{gen}"]
            for gen, members in plan
            if me in members
        ]
        assert lines == expected
