"""How every EDL process logs: text lines (the default) or one JSON object a line.

JSON is for log pipelines (Loki, Elasticsearch, Cloud Logging) that parse fields instead of
matching text. Chosen by ``--log-format`` or ``EDL_LOG_FORMAT``, the same for every CLI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TextIO

from edl_common.environment import unknown_variables

FORMATS = ("text", "json")
ENV = "EDL_LOG_FORMAT"


def json_line(
    created: float, level: str, logger: str, message: str, exception: str | None = None
) -> str:
    """One log record as one line of JSON.

    Its fields: time (RFC 3339, UTC), level, logger, message, and the exception's traceback
    when there is one.
    """
    when = dt.datetime.fromtimestamp(created, dt.UTC)
    doc: dict[str, object] = {
        "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "level": level.lower(),
        "logger": logger,
        "message": message,
    }
    if exception is not None:
        doc["exception"] = exception
    return json.dumps(doc, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (`json_line`)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        exception = self.formatException(record.exc_info) if record.exc_info else None
        return json_line(
            record.created, record.levelname, record.name, record.getMessage(), exception
        )


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-format text|json`` (default: ``EDL_LOG_FORMAT``, else text)."""
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=None,
        help=f"log lines as text or one JSON object each (env {ENV}; default text)",
    )


def log_format(flag: str | None, env: Mapping[str, str]) -> str:
    """The flag, else ``EDL_LOG_FORMAT``, else text.

    Raises:
        ValueError: ``EDL_LOG_FORMAT`` is neither text nor json.
    """
    chosen = flag or env.get(ENV, "").strip() or "text"
    if chosen not in FORMATS:
        raise ValueError(f"{ENV}={chosen!r}: expected text or json")
    return chosen


def configure_logging(
    level: str, fmt: str, text_format: str | logging.Formatter, stream: TextIO | None = None
) -> None:
    """Root logging at `level` to `stream` (stderr), as text (`text_format`) or JSON."""
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
    elif isinstance(text_format, logging.Formatter):
        formatter = text_format
    else:
        formatter = logging.Formatter(text_format)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def log_format_in(argv: list[str] | tuple[str, ...], env: Mapping[str, str]) -> str:
    """`log_format` of ``--log-format`` as written before any ``--`` in `argv`.

    For CLIs whose parser hands its flags elsewhere (edl-agent's trainer command).

    Raises:
        ValueError: an unknown format.
    """
    head = list(argv[: list(argv).index("--")] if "--" in argv else argv)
    flag = None
    for i, arg in enumerate(head):
        if arg.startswith("--log-format="):
            flag = arg.split("=", 1)[1]
        elif arg == "--log-format" and i + 1 < len(head):
            flag = head[i + 1]
    if flag is not None and flag not in FORMATS:
        raise ValueError(f"--log-format {flag!r}: expected text or json")
    return log_format(flag, env)


def json_chosen(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether `argv` (before any ``--``) or `env` asks for JSON logs.

    For the error boundary, which may end the command before its parser has run. An unknown
    format is text (its own error says so).
    """
    try:
        return log_format_in(list(argv), env) == "json"
    except ValueError:
        return False


class ToolFormatter(logging.Formatter):
    """``<logger>: <message>``, and ``<logger>: warning: <message>`` from warnings up."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as the tool's stderr line."""
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"{record.name}: {level}{record.getMessage()}"


def tool_logger(
    prog: str, flag: str | None, env: Mapping[str, str], known: Iterable[str], stream: TextIO
) -> logging.Logger:
    """The logger of an offline tool (edl-sim, edl-hpa): its progress and warnings, nothing else.

    Lines are ``<prog>: [warning: ]<message>`` as text, or JSON; libraries log only warnings.
    The unknown ``EDL_*`` variables of `env` (none of `known`) are warned about first, as every
    CLI does.

    Raises:
        ValueError: an unknown format in `flag` or ``EDL_LOG_FORMAT``.
    """
    configure_logging("warning", log_format(flag, env), ToolFormatter(), stream)
    log = logging.getLogger(prog)
    log.setLevel(logging.INFO)
    for line in unknown_variables(env, known):
        log.warning("%s", line)
    return log
