"""`edl-agent`: the per-pod entrypoint that runs a trainer and exports its metrics.

    edl-agent run [--port N] [--host H] [--metrics-dir D] [...] -- <trainer command...>

Every failure the user can cause (unknown flag, port in use, unusable metrics directory, a
trainer that cannot be executed) ends with one `edl-agent: error: ...` line on stderr and a
non-zero exit; a trainer that fails is reported in one line and its status becomes ours.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import NoReturn

import agent
from agent.errors import AgentError, ConfigError, TrainerStartError
from agent.process.settings import OPTIONS, AgentSettings
from agent.process.temp_dirs import temporary_dir
from agent.process.trainer_supervisor import TrainerSupervisor
from agent.trainer import frameworks
from agent.trainer.frameworks.base import Framework
from agent.trainer.reports import prepare_metrics_dir
from edl_common.environment import unknown_variables
from edl_common.error_boundary import EXIT_FAILURE, ErrorExit, run_command
from edl_common.logs import (
    add_log_format_argument,
    configure_logging,
    json_chosen,
    log_format_in,
)
from edl_common.options import Parser, read
from edl_common.options import add_arguments as add_options

log = logging.getLogger("agent")

EXIT_CANNOT_EXECUTE = 127
_POLL_SECONDS = 0.2


class _Version(argparse.Action):
    """``--version``: the version is read only when asked for (see `agent.__getattr__`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings, argparse.SUPPRESS, nargs=0, help="print the version and exit"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        """Prints ``edl-agent VERSION`` on stdout and exits 0."""
        print(f"edl-agent {agent.__version__}")
        parser.exit()


class _Parser(Parser):
    """One-line usage errors that point at the one verb's help."""

    def error(self, message: str) -> NoReturn:
        """Raises `ConfigError`."""
        raise ConfigError(f"{message} (see `edl-agent run --help`)")


def wants_elastic(argv: Sequence[str]) -> bool:
    """True when `--elastic` comes before the `--` that starts the trainer command."""
    args = list(argv)
    return "--elastic" in (args[: args.index("--")] if "--" in args else args)


def build_parser(elastic: bool = False) -> argparse.ArgumentParser:
    """The `edl-agent` command line (flags override `EDL_AGENT_*` variables).

    The elastic flags are added only with `elastic=True`: `agent.elastic` pulls in Paddle, which
    a plain agent must not pay for (seconds of import, warnings on stderr).
    """
    parser = _Parser(prog="edl-agent", description="EDL per-pod agent.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="verb", metavar="run", parser_class=_Parser)
    run = sub.add_parser(
        "run",
        help="run a trainer command and export its metrics",
        usage="edl-agent run [options] -- <trainer command...>",
        description="Runs the trainer command as a child process with its world in the "
        "framework's environment (PADDLE_*, or RANK/WORLD_SIZE/MASTER_*) plus EDL_*, and "
        "serves /metrics, /healthz and /readyz until it exits.",
    )
    add_options(run, OPTIONS)
    add_log_format_argument(run)
    if elastic:
        from agent.elastic.runner import add_arguments

        add_arguments(run)
    else:
        run.epilog = "Elastic training: add --elastic (see `edl-agent run --elastic --help`)."
    return parser


def known_variables() -> set[str]:
    """Every ``EDL_*`` variable the agent or its trainer reads."""
    from agent.elastic.runner import ELASTIC_TABLE
    from agent.protocol import env as names
    from agent.trainer.frameworks.torch import ENV_BACKEND, ENV_LAZY_DYNAMO

    known = {o.env for o in (*OPTIONS, *ELASTIC_TABLE) if o.env}
    known |= {v for v in vars(names).values() if isinstance(v, str) and v.startswith("EDL_")}
    # + environment.PROJECT_VARIABLES
    return known | {"EDL_NAMESPACE", ENV_BACKEND, ENV_LAZY_DYNAMO}


def parse_args(
    argv: Sequence[str], env: Mapping[str, str]
) -> tuple[AgentSettings, tuple[str, ...]]:
    """Settings (environment, then flags) and the trainer command after `--`."""
    args = list(argv)
    if "--" in args:
        cut = args.index("--")
        head, command = args[:cut], tuple(args[cut + 1 :])
    else:
        head, command = args, ()
    elastic = wants_elastic(args)
    ns = build_parser(elastic).parse_args(head)
    if ns.verb != "run":
        raise ConfigError("missing verb: edl-agent run [options] -- <trainer command...>")
    if not command:
        raise ConfigError("missing trainer command: edl-agent run [options] -- <command...>")
    flags = vars(ns)
    settings = AgentSettings.from_values(read(OPTIONS, flags, env))
    if elastic:
        from agent.elastic.runner import options_from

        settings = replace(settings, elastic=options_from(flags, env))
    return settings, command


class _SignalLatch:
    """Remembers the signals the agent received and forwards each to the trainer."""

    def __init__(self, supervisor: TrainerSupervisor) -> None:
        self._supervisor = supervisor
        self.received: list[int] = []
        self.first_at: float | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.first_at is None:
            self.first_at = time.monotonic()
        self._supervisor.forward_signal(signum)


def run(settings: AgentSettings, command: Sequence[str], env: Mapping[str, str]) -> int:
    """Serves metrics while the trainer runs; returns the exit status for the process."""
    elastic = settings.elastic
    temp_dir: str | None = None
    if settings.trainer.metrics_dir is None:
        temp_dir = str(
            temporary_dir(
                "edl-metrics-", "the metrics folder", "--metrics-dir (EDL_AGENT_METRICS_DIR)"
            )
        )
    try:
        metrics_dir = prepare_metrics_dir(settings.trainer.metrics_dir or Path(str(temp_dir)))
        if elastic is not None:
            from agent.elastic.runner import run_elastic

            return run_elastic(elastic, settings, command, env, metrics_dir)
        # The exporter and its collectors are imported here, not at the top: the elastic path
        # starts its warm trainer first and imports them after (`run_elastic`).
        from agent.collectors.gpu import open_nvml
        from agent.process.app import create_registry
        from agent.process.exporter import MetricsServer

        framework = launched_framework(settings.trainer.framework, env)
        supervisor = TrainerSupervisor(
            command,
            metrics_dir,
            framework.world_from_env(env),
            env,
            flush_seconds=settings.trainer.flush_seconds,
            stop_grace_seconds=settings.trainer.stop_grace_seconds,
            framework=framework,
        )
        nvml, nvml_note = open_nvml()
        server = MetricsServer(
            create_registry(metrics_dir, supervisor, nvml),
            supervisor.readiness,
            settings.exporter.host,
            settings.exporter.port,
        )
        server.start()
        try:
            log.info(
                "serving /metrics on http://%s:%d (metrics dir %s); %s",
                settings.exporter.host,
                server.port,
                metrics_dir,
                nvml_note,
            )
            return _supervise(supervisor, settings)
        finally:
            server.close()
            if nvml is not None:
                try:
                    nvml.nvmlShutdown()
                except Exception as e:
                    log.debug("NVML shutdown failed: %s", e)
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def launched_framework(name: str, env: Mapping[str, str]) -> Framework:
    """The framework whose variables hold the agent's own world (a run without `--elastic`).

    `name`, else the one whose variables are set, else Paddle (the agent's first framework).
    """
    if name != frameworks.AUTO:
        return frameworks.get(name)
    return frameworks.launched_for(env) or frameworks.get("paddle")


def _supervise(supervisor: TrainerSupervisor, settings: AgentSettings) -> int:
    latch = _SignalLatch(supervisor)
    previous = {s: signal.signal(s, latch) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if latch.received:
            return 128 + latch.received[0]
        supervisor.start()
        if latch.received:  # a signal that came while the trainer was being started
            supervisor.forward_signal(latch.received[-1])
        while (ended := supervisor.wait(_POLL_SECONDS)) is None:
            if latch.first_at is not None and (
                len(latch.received) > 1
                or time.monotonic() - latch.first_at > settings.trainer.stop_grace_seconds
            ):
                log.warning("trainer still running after a signal; killing it")
                supervisor.kill()
        if ended.status != 0:
            log.error("%s", ended.describe())
        else:
            log.info("%s", ended.describe())
        deadline = time.monotonic() + settings.exporter.linger_seconds
        while not latch.received and time.monotonic() < deadline:
            time.sleep(min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        return ended.status
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `edl-agent` console script; returns the process exit status."""
    env = dict(os.environ)
    debug = False

    def command_line() -> int:
        nonlocal debug
        args = sys.argv[1:] if argv is None else argv
        settings, command = parse_args(args, env)
        debug = settings.log_level.upper() == "DEBUG"
        try:
            fmt = log_format_in(list(args), env)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        configure_logging(settings.log_level, fmt, "edl-agent: %(message)s")
        for line in unknown_variables(env, known_variables()):
            log.warning("%s", line)
        return run(settings, command, env)

    return run_command(
        "edl-agent",
        command_line,
        [
            ErrorExit((TrainerStartError,), EXIT_CANNOT_EXECUTE),
            ErrorExit((AgentError,), EXIT_FAILURE),
        ],
        debug=lambda: debug,
        json_logs=lambda: json_chosen(sys.argv[1:] if argv is None else argv, env),
    )
