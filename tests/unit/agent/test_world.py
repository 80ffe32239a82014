from __future__ import annotations

import pytest

from agent.errors import ConfigError
from agent.world import TrainerWorld


def test_round_trip_through_the_environment() -> None:
    world = TrainerWorld(
        rank=1,
        world_size=2,
        generation=3,
        endpoints=("127.0.0.1:1000", "127.0.0.1:1001"),
        current_endpoint="127.0.0.1:1001",
        master="127.0.0.1:1000",
        backend="gloo",
    )
    env = world.to_env()
    assert env["PADDLE_TRAINER_ID"] == "1"
    assert env["PADDLE_TRAINERS_NUM"] == "2"
    assert env["EDL_GENERATION"] == "3"
    assert TrainerWorld.from_env(env) == world


def test_no_environment_means_a_single_rank() -> None:
    assert TrainerWorld.from_env({}) == TrainerWorld(rank=0, world_size=1, generation=0)


@pytest.mark.parametrize(
    "env",
    [
        {"PADDLE_TRAINER_ID": "x"},
        {"PADDLE_TRAINER_ID": "2", "PADDLE_TRAINERS_NUM": "2"},
        {"PADDLE_TRAINERS_NUM": "0"},
        {"EDL_GENERATION": "-1"},
        {"PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:1"},
    ],
)
def test_malformed_worlds_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        TrainerWorld.from_env(env)
