"""The framework seam: the registry, and the conformance every registered framework passes."""

from __future__ import annotations

import pytest

from agent.errors import ConfigError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.frameworks.base import Framework

PADDLE = frameworks.get("paddle")
TORCH = frameworks.get("torch")
WORLD = TrainerWorld(
    rank=1,
    world_size=2,
    generation=3,
    endpoints=("127.0.0.1:1000", "127.0.0.1:1001"),
    current_endpoint="127.0.0.1:1001",
    master="127.0.0.1:1000",
    backend="gloo",
)
ALL = [pytest.param(f, id=f.name) for f in frameworks.all_frameworks()]


# -- conformance: every registered framework ------------------------------------------------


@pytest.mark.parametrize("framework", ALL)
def test_the_world_every_trainer_needs_survives_the_launch_environment(
    framework: Framework,
) -> None:
    back = framework.world_from_env(framework.launch_env(WORLD))
    fields = ("rank", "world_size", "generation", "master", "backend")
    assert {f: getattr(back, f) for f in fields} == {f: getattr(WORLD, f) for f in fields}
    assert framework.launch_env(WORLD)["EDL_GENERATION"] == "3"


@pytest.mark.parametrize("framework", ALL)
def test_its_variables_say_it_was_launched_for_it(framework: Framework) -> None:
    assert frameworks.launched_for(framework.launch_env(WORLD)) == framework
    assert frameworks.get(framework.name) == framework
    assert frameworks.imported({framework.module: object()}) == [framework]


@pytest.mark.parametrize("framework", ALL)
def test_no_variables_mean_a_single_rank(framework: Framework) -> None:
    assert framework.world_from_env({}) == TrainerWorld(rank=0, world_size=1, generation=0)


@pytest.mark.parametrize("framework", ALL)
def test_a_world_of_one_needs_no_master(framework: Framework) -> None:
    alone = TrainerWorld(generation=2, backend="gloo")
    assert framework.world_from_env(framework.launch_env(alone)) == alone


# -- Paddle (these were agent.world's tests) ------------------------------------------------


def test_paddle_round_trip_through_the_environment() -> None:
    env = PADDLE.launch_env(WORLD)
    assert env["PADDLE_TRAINER_ID"] == "1"
    assert env["PADDLE_TRAINERS_NUM"] == "2"
    assert env["EDL_GENERATION"] == "3"
    assert PADDLE.world_from_env(env) == WORLD


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
def test_malformed_paddle_worlds_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        PADDLE.world_from_env(env)


# -- PyTorch ----------------------------------------------------------------------------------


def test_torch_gets_torchrun_variables() -> None:
    env = TORCH.launch_env(WORLD)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "1000")
    assert not any(k.startswith("PADDLE_") for k in env)
    # torch's environment has no per-rank endpoints: only the master travels
    assert TORCH.world_from_env(env) == TrainerWorld(1, 2, 3, master=WORLD.master, backend="gloo")


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "x"},
        {"RANK": "2", "WORLD_SIZE": "2"},
        {"WORLD_SIZE": "0"},
        {"EDL_GENERATION": "-1", "RANK": "0"},
    ],
)
def test_malformed_torch_worlds_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        TORCH.world_from_env(env)


def test_a_master_without_a_port_is_refused_at_launch() -> None:
    with pytest.raises(ConfigError, match="not host:port"):
        TORCH.launch_env(TrainerWorld(master="127.0.0.1"))


@pytest.mark.parametrize(
    ("value", "on"),
    [("", True), ("1", True), ("on", True), ("0", False), ("false", False), (" Off ", False)],
)
def test_the_dynamo_stand_in_is_on_unless_switched_off(value: str, on: bool) -> None:
    from agent.trainer.frameworks.torch import lazy_dynamo_from_env

    assert lazy_dynamo_from_env({"EDL_TORCH_LAZY_DYNAMO": value}) is on
    assert lazy_dynamo_from_env({}) is True
    with pytest.raises(ConfigError, match="EDL_TORCH_LAZY_DYNAMO='maybe': expected true"):
        lazy_dynamo_from_env({"EDL_TORCH_LAZY_DYNAMO": "maybe"})


def test_the_agent_knows_the_torch_variables() -> None:
    """Set on the agent, they pass through to its trainer: no unknown-variable warning."""
    from agent.process.cli import known_variables
    from edl_common.environment import unknown_variables

    env = {"EDL_TORCH_LAZY_DYNAMO": "0", "EDL_TORCH_BACKEND": "gloo"}
    assert unknown_variables(env, known_variables()) == []
    (line,) = unknown_variables({"EDL_TORCH_LAZY_DYNAMOS": "0"}, known_variables())
    assert line.endswith("(did you mean EDL_TORCH_LAZY_DYNAMO?)")


# -- choosing ---------------------------------------------------------------------------------


def test_an_unknown_framework_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown framework 'tensorflow': expected one of"):
        frameworks.get("tensorflow")


def test_the_trainer_uses_the_named_or_else_the_one_imported_framework() -> None:
    only_torch = {"torch": object()}
    assert frameworks.choose({}, modules=only_torch) == TORCH
    assert frameworks.choose({"EDL_FRAMEWORK": "paddle"}, modules=only_torch) == PADDLE
    assert frameworks.choose({"EDL_FRAMEWORK": "paddle"}, "torch", only_torch) == TORCH
    assert frameworks.choose({"EDL_FRAMEWORK": "auto"}, modules=only_torch) == TORCH
    with pytest.raises(ConfigError, match="imports several of"):
        frameworks.choose({}, modules={"torch": 1, "paddle": 2})
    with pytest.raises(ConfigError, match="imports none of"):
        frameworks.choose({}, modules={})


def test_the_world_is_read_in_whichever_variables_are_set() -> None:
    assert frameworks.world_from_env({"RANK": "1", "WORLD_SIZE": "3"}).world_size == 3
    assert frameworks.world_from_env({"PADDLE_TRAINERS_NUM": "2"}).world_size == 2
    assert frameworks.world_from_env({"EDL_GENERATION": "4"}) == TrainerWorld(generation=4)
    named = {"EDL_FRAMEWORK": "torch", "WORLD_SIZE": "2", "PADDLE_TRAINERS_NUM": "3"}
    assert frameworks.world_from_env(named).world_size == 2
