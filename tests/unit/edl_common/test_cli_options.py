"""Every option of every CLI, given a bad value by flag and by variable: one line, exit 2.

The cases come from the option tables, so a new option is covered without an edit here; a
typed option without a value it refuses fails `test_every_typed_option_has_a_refused_value`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import agent.process.cli
import edl_sim.cluster.cli
import edl_sim.hpa.cli
import metrics_adapter.cli
from agent.elastic.runner import ELASTIC_TABLE
from agent.process.settings import OPTIONS as AGENT_OPTIONS
from edl_common.options import LIST, PATH, TEXT, Option
from metrics_adapter.options import OPTIONS as ADAPTER_OPTIONS

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Cli:
    name: str
    options: tuple[Option, ...]
    argv: Callable[[list[str], str], list[str]]
    """The command line around the flags under test (without the base flag of that option)."""
    main: Callable[[list[str]], int]
    module: Any
    """The module whose `past` attribute must not be reached with a bad value."""
    past: str


def _agent(options: tuple[Option, ...], elastic: bool) -> Cli:
    def argv(flags: list[str], tested: str) -> list[str]:
        base = {"job": ["--job", "j"], "membership": ["--membership", "local:/nonexistent"]}
        more = [f for name, pair in base.items() if name != tested for f in pair]
        return ["run", *(["--elastic", *more] if elastic else []), *flags, "--", "true"]

    return Cli(
        "edl-agent --elastic" if elastic else "edl-agent",
        options,
        argv,
        agent.process.cli.main,
        agent.process.cli,
        "run",
    )


def _hpa_argv(command: str) -> Callable[[list[str], str], list[str]]:
    def argv(flags: list[str], tested: str) -> list[str]:
        return [command, "hpa.yaml", *flags]

    return argv


def _sim_argv(flags: list[str], tested: str) -> list[str]:
    files = [f"--{name}={name}.csv" for name in ("workload", "curves", "cluster") if name != tested]
    return ["run", *files, *flags]


CLIS = (
    _agent(AGENT_OPTIONS, elastic=False),
    _agent((*AGENT_OPTIONS, *ELASTIC_TABLE), elastic=True),
    Cli(
        "edl-adapter",
        ADAPTER_OPTIONS,
        lambda flags, _tested: ["serve", *flags],
        metrics_adapter.cli.main,
        metrics_adapter.cli,
        "serve",
    ),
    *(
        Cli(
            f"edl-hpa {command}",
            table,
            _hpa_argv(command),
            edl_sim.hpa.cli.main,
            edl_sim.hpa.cli,
            command,
        )
        for command, table in edl_sim.hpa.cli.TABLES.items()
    ),
    Cli(
        "edl-sim run",
        edl_sim.cluster.cli.RUN,
        _sim_argv,
        edl_sim.cluster.cli.main,
        edl_sim.cluster.cli,
        "_run",
    ),
)


def _cases() -> list[Any]:
    cases = []
    for cli in CLIS:
        for option in cli.options:
            if option.refused is None or option.name == "elastic":
                continue
            if option.flag is not None:
                case = (cli, option, "flag")
                cases.append(pytest.param(*case, id=f"{cli.name} {option.flag}"))
            if option.env is not None:
                case = (cli, option, "env")
                cases.append(pytest.param(*case, id=f"{cli.name} {option.env}"))
    return cases


@pytest.mark.parametrize(("cli", "option", "how"), _cases())
def test_a_bad_value_is_one_line_and_exit_2(
    cli: Cli,
    option: Option,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for other in cli.options:  # nothing from this machine's environment
        if other.env:
            monkeypatch.delenv(other.env, raising=False)

    def reached(*args: object, **kwargs: object) -> int:
        raise AssertionError(f"{cli.name} accepted {option.refused!r} for {option.name}")

    monkeypatch.setattr(cli.module, cli.past, reached)
    bad = str(option.refused)
    if how == "flag":
        assert option.flag is not None
        argv = cli.argv([f"{option.flag}={bad}"], option.name)
    else:
        assert option.env is not None
        monkeypatch.setenv(option.env, bad)
        argv = cli.argv([], option.name)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    named = option.flag if how == "flag" else option.env
    assert err[0].startswith(f"{cli.name.split()[0]}: error: "), err
    assert str(named) in err[0] or option.name.replace("_", "-") in err[0], err


def test_every_typed_option_has_a_refused_value() -> None:
    """Only free text, paths and lists accept everything; a number, a duration, a choice do not."""
    for cli in CLIS:
        lax = [
            o.name for o in cli.options if o.refused is None and o.kind not in (TEXT, PATH, LIST)
        ]
        assert not lax, (cli.name, lax)
    assert len(_cases()) > 150  # every CLI is walked (the tables are not empty)


def test_flags_and_variables_are_unique_per_cli() -> None:
    for cli in CLIS:
        flags = [f for o in cli.options for f in (o.flag, *o.aliases) if f]
        envs = [o.env for o in cli.options if o.env]
        assert len(flags) == len(set(flags)), cli.name
        assert len(envs) == len(set(envs)), cli.name


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"EDL_HEARTBEAT_INTERVAL": "1", "EDL_MEMBER_TTL": "2"},
            "EDL_MEMBER_TTL=2s must exceed two heartbeat intervals",
        ),
        ({"EDL_DRAIN_TIMEOUT": "soon"}, "EDL_DRAIN_TIMEOUT='soon': invalid duration"),
    ],
)
def test_the_process_says_one_line_not_a_traceback(
    env: dict[str, str], message: str, tmp_path: Path
) -> None:
    """The two values of issue 17 that ended in tracebacks, through the real console script."""
    argv = [str(BIN / "edl-agent"), "run", "--elastic", "--job", "j"]
    argv += ["--membership", f"local:{tmp_path}", "--", "true"]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("edl-agent: error: ") and message in lines[0], lines
