"""A trainer not yet in its world follows the newer one it is handed (issue 19).

`ElasticTrainer` with a recording collective (one process: every group is a world of one, so
nothing crosses a network): while it waits at the rendezvous of a generation whose rank 0
never answers, the agent hands it a newer world; it must join that one instead of waiting
for a C++ formation timeout, and a SIGTERM there must end it cleanly (exit 75) at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.protocol.control import RESCALE_EXIT, ControlChannel, NextWorld
from agent.protocol.trainer_world import TrainerWorld
from tests.unit.agent.helpers import trainer

ROOT = Path(__file__).resolve().parents[3]


def test_a_trainer_meeting_its_peers_follows_a_newer_world_at_once(tmp_path: Path) -> None:
    nobody = "127.0.0.1:9"  # rank 0 of generation 4 never answers (it died)
    stale = TrainerWorld(1, 2, 4, ("127.0.0.1:8", "127.0.0.1:9"), "127.0.0.1:9", nobody, "gloo")
    et, collective = trainer(tmp_path, stale)
    newer = TrainerWorld(0, 1, 5, ("127.0.0.1:9",), "127.0.0.1:9", "127.0.0.1:9", "gloo")
    channel = ControlChannel(tmp_path / "control")
    threading.Timer(0.5, channel.hand_over, args=(NextWorld(5, newer),)).start()
    t0 = time.monotonic()
    et._init_collective()
    assert time.monotonic() - t0 < 10  # not the 60 s meeting bound, nor a C++ timeout
    assert [w.generation for w in collective.formed] == [5]  # generation 4 was never formed
    assert (et.generation, et.rank, et.world_size) == (5, 0, 1)
    timings = channel.timings(5)
    assert timings is not None and timings.initialised is not None


SIGTERM_WHILE_MEETING = """
import logging, os, signal, sys, threading
from pathlib import Path
logging.basicConfig(level=logging.INFO)
sys.path.insert(0, sys.argv[2])
from tests.unit.agent.helpers import trainer
from agent.protocol.trainer_world import TrainerWorld
world = TrainerWorld(1, 2, 4, ("127.0.0.1:8", "127.0.0.1:9"), "127.0.0.1:9", "127.0.0.1:9", "gloo")
et, _ = trainer(Path(sys.argv[1]), world)
signal.signal(signal.SIGTERM, et._on_sigterm)
threading.Timer(0.5, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
et._init_collective()
sys.exit(3)  # never reached: the trainer exits 75 itself
"""


@pytest.mark.slow
def test_sigterm_while_meeting_is_a_clean_stop(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", SIGTERM_WHILE_MEETING, str(tmp_path), str(ROOT)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == RESCALE_EXIT, proc.stderr[-2000:]
    assert time.monotonic() - t0 < 30
    assert "stopped before joining generation 4" in proc.stderr
