"""The one CLI error boundary: our errors and usage errors are one line and their status;
anything else is one line and 1, with a traceback only when asked to debug."""

from __future__ import annotations

import functools
import io
import json

import pytest

import agent.process.cli
import edl_sim.cluster.cli
import edl_sim.hpa.cli
from edl_common.error_boundary import EXIT_FAILURE, EXIT_USAGE, ErrorExit, run_command
from edl_common.errors import ConfigError

pytestmark = pytest.mark.unit


class OurError(Exception):
    pass


def run(error: Exception, debug: bool = False) -> tuple[int, str]:
    def body() -> int:
        raise error

    err = io.StringIO()
    status = run_command("edl-x", body, [ErrorExit((OurError,), 7)], err, lambda: debug)
    return status, err.getvalue()


def test_a_command_that_succeeds_keeps_its_status() -> None:
    assert run_command("edl-x", lambda: 3, stderr=io.StringIO()) == 3


def test_our_errors_and_usage_errors_are_one_line_and_their_status() -> None:
    assert run(OurError("the trace file\nis empty")) == (
        7,
        "edl-x: error: the trace file is empty\n",
    )
    assert run(ConfigError("--port='x': not an integer")) == (
        EXIT_USAGE,
        "edl-x: error: --port='x': not an integer\n",
    )


def test_an_unexpected_error_is_one_line_and_1_with_the_traceback_only_when_debugging() -> None:
    status, text = run(KeyError("gpu"))
    assert (status, text) == (EXIT_FAILURE, "edl-x: error: unexpected KeyError: 'gpu'\n")
    status, text = run(KeyError("gpu"), debug=True)
    assert status == EXIT_FAILURE
    assert text.startswith("edl-x: error: unexpected KeyError: 'gpu'\nTraceback")


def test_with_json_logs_the_line_is_one_json_record_the_traceback_inside() -> None:
    def body() -> int:
        raise KeyError("gpu")

    for debug in (False, True):
        err = io.StringIO()
        asked = functools.partial(bool, debug)
        status = run_command("edl-x", body, (), err, asked, json_logs=lambda: True)
        (line,) = err.getvalue().splitlines()
        record = json.loads(line)
        assert status == EXIT_FAILURE
        assert (record["level"], record["logger"], record["message"]) == (
            "error", "edl-x", "unexpected KeyError: 'gpu'")  # fmt: skip
        assert ("Traceback" in record.get("exception", "")) is debug
    err = io.StringIO()
    assert run_command("edl-x", lambda: int("x"), (), err, json_logs=lambda: False) == 1
    assert err.getvalue().startswith("edl-x: error: unexpected ValueError")


def boom(*args: object, **kwargs: object) -> int:
    raise ZeroDivisionError("division by zero")


class Broken:
    def parse_args(self, argv: object) -> None:
        boom()


def test_each_offline_cli_ends_an_unexpected_error_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(edl_sim.cluster.cli, "_parser", Broken)
    monkeypatch.setattr(edl_sim.hpa.cli, "parse", boom)
    for prog, main in (("edl-sim", edl_sim.cluster.cli.main), ("edl-hpa", edl_sim.hpa.cli.main)):
        err = io.StringIO()
        assert main(["run"], io.StringIO(), err) == EXIT_FAILURE
        assert err.getvalue() == f"{prog}: error: unexpected ZeroDivisionError: division by zero\n"


def test_the_agent_ends_an_unexpected_error_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(agent.process.cli, "run", boom)
    assert agent.process.cli.main(["run", "--", "true"]) == 1
    assert (
        capsys.readouterr().err
        == "edl-agent: error: unexpected ZeroDivisionError: division by zero\n"
    )
