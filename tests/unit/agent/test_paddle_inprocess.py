"""Paddle's in-process re-init on the installed Paddle: the self-test, and that a generation's
store stops listening once the next generation forms (private APIs: this fails loudly on a
Paddle whose internals moved).

Each case runs in a fresh process: Paddle's group registries are process-wide. Groups of
several ranks across generations: tests/integration/agent/test_elastic_paddle_groups.py; the
sockets over 100 generations: bench/bench_store_sockets.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("paddle")

ROOT = Path(__file__).resolve().parents[3]

GENERATIONS = """
import json, socket
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.paddle.inprocess import Generations, form_group, self_test
from edl_common.ports import hold_port

def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return True
    except ConnectionRefusedError:
        return False

out = {"self_test": self_test("gloo"), "other_backend": self_test("nccl")}
generations, held, ports = Generations(), [], []
for generation in (1, 2, 3):
    port = hold_port()  # as the rendezvous holds it for rank 0's store
    port.share()
    held.append(port)
    world = TrainerWorld(0, 1, generation, master=f"127.0.0.1:{port.port}", backend="gloo")
    form_group(world, 10, generations)
    ports.append(port.port)
    out[f"after {generation}"] = [listening(p) for p in ports]
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_self_test_passes_and_each_generation_releases_the_last_store() -> None:
    env = {**os.environ, "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "1"}
    done = subprocess.run(
        [sys.executable, "-c", GENERATIONS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["self_test"] is None
    assert "only gloo" in out["other_backend"]
    # only the newest generation's store listens: each earlier one closed when the next formed
    assert out["after 1"] == [True]
    assert out["after 2"] == [False, True]
    assert out["after 3"] == [False, False, True]
