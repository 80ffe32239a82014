"""Four real processes re-form Paddle gloo groups in-process through ten generations.

The production path of an in-process rescale, without agents: every rank meets its
generation's ranks on rank 0's rendezvous port (`agent.trainer.rendezvous`), then
`PaddleCollective` forms the group over the *fresh* store rank 0 handed out. Sizes change
every generation while the same process stays rank 0, so its master port comes back every
other generation: that is where a reused Paddle TCPStore handed the next group stale gloo
addresses (``address.cc:30 sizeof(impl_) == bytes.size(). 136 vs 45``) or hung it, within
four or five generations in every run measured (issue 19). Then rank 0 moves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.elastic.runner import free_static_port
from tests.support.frameworks import needs

pytestmark = needs("paddle")  # its processes import paddle; collecting does not

ROOT = Path(__file__).resolve().parents[3]

PROCESS = """
import json, sys
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.base import ReduceOp
from agent.trainer.frameworks.paddle.collective import PaddleCollective
from agent.trainer.rendezvous import RendezvousHost, meet

me, ports, plan = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
coll, hosts = PaddleCollective(), {}
for generation, members in plan:
    if me not in members:
        continue
    rank = members.index(me)
    master = f"127.0.0.1:{ports[members[0]][generation % 2]}"
    if rank == 0 and master not in hosts:
        hosts[master] = RendezvousHost(master)
    host = hosts.get(master) if rank == 0 else None
    store = meet(master, generation, rank, len(members), 60, lambda: False, host)
    world = TrainerWorld(rank, len(members), generation, master=store, backend="gloo")
    coll.init(world, in_process=True, timeout_seconds=60)
    top = coll.all_reduce_ints([me + 1], ReduceOp.MAX)
    low = coll.all_reduce_ints([me], ReduceOp.MIN)
    blob = coll.broadcast_bytes(f"state of g{generation}".encode() if rank == 0 else b"", 0)
    print(json.dumps([generation, rank, top[0], low[0], blob.decode(), store]), flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_groups_of_changing_size_on_one_rank_0_never_meet_a_stale_store() -> None:
    plan = [
        (1, [0, 1]),
        (2, [0, 1]),
        (3, [0, 1, 2, 3]),
        (4, [0, 2, 3]),
        (5, [0, 1]),
        (6, [0, 1, 2, 3]),
        (7, [0, 3]),
        (8, [0, 1, 2]),
        (9, [2, 0, 1]),  # rank 0 moves to another process
        (10, [2, 3]),
    ]
    chosen: set[int] = set()
    while len(chosen) < 8:  # as EDL_TRAINER_PORTS=auto does for members on one host
        chosen.add(free_static_port())
    ports = json.dumps([sorted(chosen)[i : i + 2] for i in range(0, 8, 2)])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, str(me), ports, json.dumps(plan)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(4)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        outputs.append([json.loads(line) for line in out.splitlines()])
    stores: dict[int, str] = {}
    for me, lines in enumerate(outputs):
        expected = [
            [gen, members.index(me), max(members) + 1, min(members), f"state of g{gen}"]
            for gen, members in plan
            if me in members
        ]
        assert [line[:5] for line in lines] == expected
        for gen, *_, store in lines:
            assert stores.setdefault(gen, store) == store  # one store per group, for everyone
    assert len(set(stores.values())) == len(plan)  # and a new one for every group
