"""The agent <-> trainer control channel: typed messages, atomic files, clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.protocol.control import ControlChannel, NextWorld, Timings
from agent.protocol.errors import ProtocolError
from agent.protocol.trainer_world import TrainerWorld

WORLD = TrainerWorld(1, 2, 5, ("h:1", "h:2"), "h:2", "h:1", "gloo")


def test_messages_round_trip_through_json() -> None:
    for message in (NextWorld(5, WORLD), NextWorld(6, None)):
        assert NextWorld.from_json(message.to_json()) == message
    timings = Timings(rank=1, reinit="in-process", framework="torch", started=1.5, first_step=3.0)
    assert Timings.from_json(timings.to_json()) == timings
    assert Timings.from_json('{"started": 1, "unknown": "ignored"}') == Timings(started=1.0)
    assert TrainerWorld.from_dict(WORLD.to_dict()) == WORLD


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"world": {}}',
        '{"generation": 1, "world": {"rank": 3, "world_size": 2, "generation": 1}}',
        '{"generation": "x", "leave": true}',
    ],
)
def test_a_next_world_that_does_not_parse_is_refused(text: str) -> None:
    with pytest.raises(ProtocolError):
        NextWorld.from_json(text)


def test_bad_timings_are_refused() -> None:
    with pytest.raises(ProtocolError):
        Timings.from_json('{"first_step": "soon"}')
    with pytest.raises(ConfigError):
        TrainerWorld.from_dict({"rank": 0})


def test_the_channel_hands_over_and_drains_by_generation(tmp_path: Path) -> None:
    channel = ControlChannel(tmp_path)
    assert channel.next_world() is None and not channel.drain_requested(1)
    channel.hand_over(NextWorld(5, WORLD))
    assert channel.next_world() == NextWorld(5, WORLD)
    assert channel.drain_requested(4) and not channel.drain_requested(5)  # stale once there
    (tmp_path / "drain").write_text("now please")
    assert channel.drain_requested(9)  # a hand edit counts as a request
    (tmp_path / "world.json").write_text("{trunc")
    assert channel.next_world() is None  # half a message is no message
    channel.clear()
    assert channel.next_world() is None and not channel.drain_requested(1)
    assert not list(tmp_path.glob(".*"))  # no temp files left behind


def test_the_channel_reports_timings_per_generation(tmp_path: Path) -> None:
    channel = ControlChannel(tmp_path)
    assert channel.timings(2) is None
    channel.report(2, Timings(started=1.0, framework="paddle"))
    assert channel.timings(2) == Timings(started=1.0, framework="paddle")
    assert channel.timings(3) is None


def test_the_finish_is_found_in_whichever_generation_the_trainer_reported_it(
    tmp_path: Path,
) -> None:
    channel = ControlChannel(tmp_path)
    assert channel.finished_step() is None  # nothing reported yet
    channel.report(9, Timings(started=1.0, first_step=2.0, stopped=3.0))
    channel.report(10, Timings(started=4.0))  # handed over while the last step of 9 ran
    assert channel.finished_step() is None
    channel.report(9, Timings(started=1.0, first_step=2.0, finished=5.0, finished_step=184))
    assert channel.finished_step() == 184
    finished = Timings(started=1.0, first_step=2.0, finished=5.0, finished_step=184)
    assert channel.timings(9) == finished
