"""Settings from EDL_AGENT_* variables and flags, and the one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.process.cli import parse_args
from agent.process.settings import AgentSettings


def test_defaults() -> None:
    settings, command = parse_args(["run", "--", "python", "train.py"], {})
    assert settings == AgentSettings.from_env({})
    assert (settings.exporter.host, settings.exporter.port) == ("0.0.0.0", 9400)
    assert command == ("python", "train.py")


def test_environment_then_flags() -> None:
    env = {"EDL_AGENT_PORT": "9500", "EDL_AGENT_HOST": "127.0.0.1", "EDL_AGENT_METRICS_DIR": "/m"}
    settings, _ = parse_args(["run", "--port", "9600", "--", "x"], env)
    assert settings.exporter.port == 9600
    assert settings.exporter.host == "127.0.0.1"
    assert settings.trainer.metrics_dir == Path("/m")


def test_trainer_flags_after_the_separator_are_not_ours() -> None:
    settings, command = parse_args(["run", "--", "train.py", "--port", "1"], {})
    assert settings.exporter.port == 9400
    assert command == ("train.py", "--port", "1")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["run", "--bogus", "--", "x"], {}, "unrecognized arguments: --bogus"),
        (["run", "--port", "http", "--", "x"], {}, "--port='http': not an integer"),
        (["run", "--port", "70000", "--", "x"], {}, "--port='70000': must be 0-65535"),
        (["run", "--", "x"], {"EDL_AGENT_PORT": "abc"}, "EDL_AGENT_PORT='abc'"),
        (["run"], {}, "missing trainer command"),
        (["--", "x"], {}, "missing verb"),
        (["walk", "--", "x"], {}, "invalid choice: 'walk'"),
        (
            ["run", "--framework", "jax", "--", "x"],
            {},
            "--framework='jax': expected one of auto, paddle, torch",
        ),
        (["run", "--", "x"], {"EDL_FRAMEWORK": "mxnet"}, "EDL_FRAMEWORK='mxnet': expected one of"),
    ],
)
def test_bad_input_is_one_config_error(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_args(argv, env)
    assert "\n" not in str(info.value)


def test_the_framework_comes_from_the_flag_then_edl_framework() -> None:
    assert parse_args(["run", "--", "x"], {})[0].trainer.framework == "auto"
    assert (
        parse_args(["run", "--", "x"], {"EDL_FRAMEWORK": "torch"})[0].trainer.framework == "torch"
    )
    flag = ["run", "--framework", "paddle", "--", "x"]
    assert parse_args(flag, {"EDL_FRAMEWORK": "torch"})[0].trainer.framework == "paddle"


@pytest.mark.slow
@pytest.mark.parametrize("elastic", [[], ["--elastic", "--job", "j", "--membership", "local:/m"]])
def test_the_agent_imports_no_framework(elastic: list[str]) -> None:
    """The agent process only maps worlds to variables; importing Paddle or torch would cost it
    seconds and hundreds of MB (both are imported by trainers only)."""
    import subprocess
    import sys

    argv = ["run", "--port", "1", *elastic, "--", "x"]
    code = (
        "import sys, agent.process.cli, agent.elastic.runner, agent.elastic.supervisor\n"
        "from agent.protocol.trainer_world import TrainerWorld\n"
        f"agent.process.cli.parse_args({argv!r}, {{}})\n"
        "for name in ('paddle', 'torch'):\n"
        "    agent.process.cli.launched_framework(name, {}).launch_env(TrainerWorld())\n"
        "bad = [m for m in ('paddle', 'torch', 'numpy') if m in sys.modules]\n"
        "assert not bad, f'imported {bad}'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_readme_names_every_on_finished_value() -> None:
    """What a finished job does is the user's choice: the README lists every value."""
    from agent.elastic.option_table import ELASTIC_OPTIONS

    (option,) = [o for o in ELASTIC_OPTIONS if o.name == "on_finished"]
    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    assert option.kind.choices and all(f"`{v}`" in readme for v in option.kind.choices)
    assert f"`{option.default}` (the default" in readme
