"""Settings from EDL_AGENT_* variables and flags, and the one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import parse_args
from agent.config import AgentSettings
from agent.errors import ConfigError


def test_defaults() -> None:
    settings, command = parse_args(["run", "--", "python", "train.py"], {})
    assert settings == AgentSettings()
    assert (settings.host, settings.port) == ("0.0.0.0", 9400)
    assert command == ("python", "train.py")


def test_environment_then_flags() -> None:
    env = {"EDL_AGENT_PORT": "9500", "EDL_AGENT_HOST": "127.0.0.1", "EDL_AGENT_METRICS_DIR": "/m"}
    settings, _ = parse_args(["run", "--port", "9600", "--", "x"], env)
    assert settings.port == 9600
    assert settings.host == "127.0.0.1"
    assert settings.metrics_dir == Path("/m")


def test_trainer_flags_after_the_separator_are_not_ours() -> None:
    settings, command = parse_args(["run", "--", "train.py", "--port", "1"], {})
    assert settings.port == 9400
    assert command == ("train.py", "--port", "1")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["run", "--bogus", "--", "x"], {}, "unrecognized arguments: --bogus"),
        (["run", "--port", "http", "--", "x"], {}, "port='http' is not a valid port"),
        (["run", "--port", "70000", "--", "x"], {}, "port must be 0-65535"),
        (["run", "--", "x"], {"EDL_AGENT_PORT": "abc"}, "EDL_AGENT_PORT='abc'"),
        (["run"], {}, "missing trainer command"),
        (["--", "x"], {}, "missing verb"),
        (["walk", "--", "x"], {}, "invalid choice: 'walk'"),
    ],
)
def test_bad_input_is_one_config_error(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_args(argv, env)
    assert "\n" not in str(info.value)


def test_a_plain_agent_does_not_import_paddle() -> None:
    """`agent.elastic` pulls in Paddle; the plain agent must not pay seconds of import for it."""
    import subprocess
    import sys

    code = (
        "import sys, agent.cli\n"
        "agent.cli.parse_args(['run', '--port', '1', '--', 'x'], {})\n"
        "assert 'paddle' not in sys.modules, 'paddle was imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
