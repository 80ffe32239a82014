"""--log-format json and the warning for unknown EDL_* variables, as the CLIs use them."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edl_common.environment import PROJECT_VARIABLES, unknown_variables
from edl_common.logs import configure_logging, log_format, log_format_in


def test_json_lines_carry_level_logger_message_and_the_exception() -> None:
    out = io.StringIO()
    configure_logging("info", "json", "%(message)s", stream=out)
    try:
        logging.getLogger("edl.test").info("scaled %s to %d", "digits", 3)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("edl.test").exception("failed")
        logging.getLogger("edl.test").debug("not at info")
    finally:
        configure_logging("warning", "text", "%(message)s")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert (first["level"], first["logger"], first["message"]) == ("info", "edl.test",
                                                                  "scaled digits to 3")  # fmt: skip
    assert first["time"].endswith("Z")
    assert "RuntimeError: boom" in second["exception"]


def test_the_format_comes_from_the_flag_then_the_environment() -> None:
    assert log_format(None, {}) == "text"
    assert log_format(None, {"EDL_LOG_FORMAT": "json"}) == "json"
    assert log_format("text", {"EDL_LOG_FORMAT": "json"}) == "text"
    assert log_format_in(["run", "--log-format=json", "--", "x", "--log-format", "y"], {}) == "json"
    with pytest.raises(ValueError, match="expected text or json"):
        log_format(None, {"EDL_LOG_FORMAT": "yaml"})
    with pytest.raises(ValueError, match="--log-format 'xml'"):
        log_format_in(["run", "--log-format", "xml"], {})


def test_unknown_edl_variables_are_named_with_the_closest_known_one() -> None:
    env = {"EDL_SCRAPE_INTERVL": "2s", "EDL_JOB": "d", "EDL_ZZZ": "1", "HOME": "/"}
    assert unknown_variables(env, {"EDL_JOB", "EDL_SCRAPE_INTERVAL"}) == [
        "unknown environment variable EDL_SCRAPE_INTERVL is ignored "
        "(did you mean EDL_SCRAPE_INTERVAL?)",
        "unknown environment variable EDL_ZZZ is ignored",
    ]


def test_the_projects_own_build_and_test_variables_are_known() -> None:
    """`make` exports EDL_CACHE_DIR into every process it starts: no CLI may warn about it."""
    env = {"EDL_CACHE_DIR": "/c", "EDL_TEST_ARTIFACTS": "/a", "EDL_LOG_FORMAT": "json"}
    assert unknown_variables(env, set()) == []


def test_what_the_agent_sets_for_its_trainer_is_known_to_every_cli() -> None:
    """A trainer's process (and a tool it starts, or a test that trained in-process) has
    EDL_GENERATION and the rest of the agent's protocol in its environment."""
    from agent.protocol import env as protocol

    names = {v for k, v in vars(protocol).items() if k.isupper() and isinstance(v, str)}
    assert {n for n in names if n.startswith("EDL_")} <= PROJECT_VARIABLES
    assert unknown_variables({"EDL_GENERATION": "3", "EDL_MEMBER": "a"}, set()) == []


@pytest.mark.slow
@pytest.mark.parametrize("cli", ["edl-agent", "edl-adapter", "edl-hpa", "edl-sim"])
def test_every_cli_says_its_version(cli: str) -> None:
    from edl_common.version import edl_version

    binary = f"{sys.prefix}/bin/{cli}"
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"{cli} {edl_version()}"


HPA_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "hpa"
TOOL_RUNS = {
    "edl-hpa": [
        "simulate",
        str(HPA_EXAMPLE / "hpa.yaml"),
        "--trace",
        str(HPA_EXAMPLE / "trace.csv"),
        "--no-plot",
    ],
    "edl-sim": ["scenario", "edl2018-case1", "--out", "{tmp}"],
}


@pytest.mark.slow
@pytest.mark.parametrize("cli", sorted(TOOL_RUNS))
def test_the_offline_tools_log_json_and_name_unknown_variables(cli: str, tmp_path: Path) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in TOOL_RUNS[cli]]
    env = {**os.environ, "EDL_LOG_FROMAT": "json"}
    text = subprocess.run(
        [f"{sys.prefix}/bin/{cli}", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 0, text.stderr
    assert (
        f"{cli}: warning: unknown environment variable EDL_LOG_FROMAT is ignored "
        "(did you mean EDL_LOG_FORMAT?)"
    ) in text.stderr.splitlines()
    as_json = subprocess.run(
        [f"{sys.prefix}/bin/{cli}", *args, "--log-format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert as_json.returncode == 0, as_json.stderr
    records = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert {"level": "warning", "logger": cli}.items() <= records[0].items()
    assert "EDL_LOG_FROMAT" in records[0]["message"]
    assert as_json.stdout == text.stdout  # the results themselves are not log lines


@pytest.mark.slow
@pytest.mark.parametrize("cli", sorted(TOOL_RUNS))
def test_a_bad_log_format_variable_is_one_line(cli: str, tmp_path: Path) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in TOOL_RUNS[cli]]
    done = subprocess.run(
        [f"{sys.prefix}/bin/{cli}", *args],
        env={**os.environ, "EDL_LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == f"{cli}: error: EDL_LOG_FORMAT='xml': expected text or json\n"


def adapter_without_a_static_file(*flags: str) -> subprocess.CompletedProcess[str]:
    """`edl-adapter serve` that logs at start, then ends on a usage error (no --static-file)."""
    return subprocess.run(
        [f"{sys.prefix}/bin/edl-adapter", "serve", "--authentication", "none",
         "--authorization", "none", *flags],
        env={**os.environ, "EDL_ADAPTER_SCRAPE_INTERVL": "2s"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_the_adapter_names_unknown_variables_and_ends_in_one_error_line() -> None:
    done = adapter_without_a_static_file()
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].endswith(
        "WARNING metrics_adapter: unknown environment variable EDL_ADAPTER_SCRAPE_INTERVL is "
        "ignored (did you mean EDL_ADAPTER_SCRAPE_INTERVAL?)"
    )
    assert lines[-1] == "edl-adapter: error: --source static needs --static-file"


@pytest.mark.slow
def test_the_adapter_logs_json_down_to_its_error_line() -> None:
    done = adapter_without_a_static_file("--log-format", "json")
    assert done.returncode == 2
    records = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    assert {"level": "warning", "logger": "metrics_adapter"}.items() <= records[0].items()
    assert "EDL_ADAPTER_SCRAPE_INTERVL" in records[0]["message"]
    assert {
        "level": "error",
        "logger": "edl-adapter",
        "message": "--source static needs --static-file",
    }.items() <= records[-1].items()
    assert records[-1]["time"].endswith("Z")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cli", "args", "message"),
    [
        ("edl-hpa", ["simulate", "missing.yaml", "--trace", "t.csv"], "No such file"),
        ("edl-sim", ["run", "--seed", "x"], "--seed='x': not an integer"),
        ("edl-sim", ["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        ("edl-adapter", ["serve", "--port", "x"], "--port='x': not an integer"),
    ],
)
def test_with_json_logs_the_error_line_is_one_json_record(
    cli: str, args: list[str], message: str, tmp_path: Path
) -> None:
    """Parse errors included: the line is JSON as soon as the command line asks for it."""
    done = subprocess.run(
        [f"{sys.prefix}/bin/{cli}", *args, "--log-format", "json"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode in (1, 2)
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"]) == ("error", cli)
    assert message in record["message"]
