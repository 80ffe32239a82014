"""Joining worlds (`WorldJoiner`): a trainer not yet in its world follows the newer one.

A recording collective (one process: every group is a world of one, so nothing crosses a
network). While a trainer waits at the rendezvous of a generation whose rank 0 never answers,
the agent hands it a newer world: it must join that one instead of waiting for a C++
formation timeout, and a SIGTERM there must end it cleanly (exit 75) at once. Milestones
reach the agent through the control channel; an agreed stop is the highest drain flag.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.protocol.control import RESCALE_EXIT, ControlChannel, NextWorld
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.errors import LeaveTraining, PeerLost
from tests.unit.agent.trainer.helpers import RecordingCollective, trainer

ROOT = Path(__file__).resolve().parents[4]
NOBODY = "127.0.0.1:9"  # rank 0 of generation 4 never answers (it died)
STALE = TrainerWorld(1, 2, 4, ("127.0.0.1:8", NOBODY), NOBODY, NOBODY, "gloo")


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_trainer_meeting_its_peers_follows_a_newer_world_at_once(tmp_path: Path) -> None:
    et = trainer(tmp_path, STALE)
    collective = et.collective
    assert isinstance(collective, RecordingCollective)
    newer = TrainerWorld(0, 1, 5, (NOBODY,), NOBODY, NOBODY, "gloo")
    channel = ControlChannel(tmp_path / "control")
    threading.Timer(0.5, channel.hand_over, args=(NextWorld(5, newer),)).start()
    # Rank 0 of generation 4 never answers: a meeting that only ended at its bound would
    # raise RendezvousTimeout here, whatever the machine's speed.
    et.joiner.join()
    assert [w.generation for w in collective.formed] == [5]  # generation 4 was never formed
    assert (et.generation, et.rank, et.world_size) == (5, 0, 1)
    timings = channel.timings(5)
    assert timings is not None and timings.initialised is not None
    assert timings.framework == "paddle" and timings.reinit == "process"


def test_a_sigterm_while_meeting_leaves_with_the_rescale_status(
    tmp_path: Path, sigterm_restored: None
) -> None:
    et = trainer(tmp_path, STALE)
    signal.signal(signal.SIGTERM, et.joiner.on_sigterm)
    threading.Timer(0.5, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(LeaveTraining) as left:  # not RendezvousTimeout: the signal ended it
        et.joiner.join()
    assert left.value.status == RESCALE_EXIT
    assert left.value.why == "stopped before joining generation 4"


SIGTERM_WHILE_MEETING = """
import logging, os, signal, sys, threading
from pathlib import Path
logging.basicConfig(level=logging.INFO)
sys.path.insert(0, sys.argv[2])
from tests.unit.agent.trainer.helpers import trainer
from agent.protocol.trainer_world import TrainerWorld
world = TrainerWorld(1, 2, 4, ("127.0.0.1:8", "127.0.0.1:9"), "127.0.0.1:9", "127.0.0.1:9", "gloo")
et = trainer(Path(sys.argv[1]), world)
signal.signal(signal.SIGTERM, et.joiner.on_sigterm)
threading.Timer(0.5, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
et.join_first_world()
sys.exit(3)  # never reached: the trainer exits 75 itself
"""


@pytest.mark.slow
def test_the_trainer_process_exits_75_on_a_sigterm_while_meeting(tmp_path: Path) -> None:
    """End to end in a process: the signal, the joiner's leave, the trainer's exit status."""
    proc = subprocess.run(
        [sys.executable, "-c", SIGTERM_WHILE_MEETING, str(tmp_path), str(ROOT)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == RESCALE_EXIT, proc.stderr[-2000:]  # a meeting timeout is not 75
    assert "stopped before joining generation 4 (exit 75)" in proc.stderr


def test_a_stop_is_agreed_when_any_rank_was_asked(tmp_path: Path) -> None:
    """Each rank's drain flag; the world's answer is their maximum (here a world of one)."""
    world = TrainerWorld(0, 1, 3, ("127.0.0.1:7",), "127.0.0.1:7", "127.0.0.1:7", "gloo")
    et = trainer(tmp_path, world)
    assert not et.joiner.stop_agreed()
    channel = ControlChannel(tmp_path / "control")
    channel.hand_over(NextWorld(4, TrainerWorld(0, 2, 4)))
    assert et.joiner.drain_requested() and et.joiner.stop_agreed()
    assert not et.joiner.leaving()  # a drain into a next world is a rescale, not a leave
    channel.hand_over(NextWorld(4, None))
    assert et.joiner.leaving()


def test_a_failed_collective_is_a_lost_peer(tmp_path: Path) -> None:
    et = trainer(tmp_path, STALE)

    def broken() -> None:
        raise RuntimeError("Connection closed by peer [127.0.0.1]:9")

    with pytest.raises(PeerLost, match="collective failed in generation 4: Connection closed"):
        et.joiner.guarded(broken)


def test_a_stand_by_takes_the_world_it_is_handed_without_a_fresh_start(tmp_path: Path) -> None:
    """A warm trainer (generation 0) waits for its world; its timings keep its start time."""
    standby = TrainerWorld(0, 1, 0)
    et = trainer(tmp_path, standby)
    started = et.joiner.timings.started
    world = TrainerWorld(1, 2, 7, ("127.0.0.1:8", "127.0.0.1:9"), "127.0.0.1:9", "127.0.0.1:8")
    channel = ControlChannel(tmp_path / "control")
    threading.Timer(0.3, channel.hand_over, args=(NextWorld(7, world),)).start()
    et.joiner.wait_as_standby()
    assert (et.generation, et.rank, et.world_size) == (7, 1, 2)
    assert et.joiner.timings.started == started
    assert os.environ["PADDLE_TRAINER_ID"] == "1"  # the framework's variables follow the world
