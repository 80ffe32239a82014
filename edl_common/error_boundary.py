"""The one error boundary of every EDL command: an exception becomes one line and a status.

Each CLI runs its body through `run_command` with the exceptions it knows and the status each
ends with (`ErrorExit` rows, first match wins); a `ConfigError` (a bad flag, variable or file)
is always one ``<prog>: error: ...`` line and `EXIT_USAGE`. Anything else is a bug, not the
user's doing: one ``<prog>: error: unexpected <Type>: ...`` line and `EXIT_FAILURE`, with the
traceback only when the command was asked to debug (e.g. ``--log-level debug``). With JSON
logs (``--log-format json`` / ``EDL_LOG_FORMAT=json``) that line is one JSON log record like the
command's others (level ``error``, logger `<prog>`), the traceback in its ``exception`` field.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from edl_common.errors import ConfigError
from edl_common.logs import json_line

EXIT_FAILURE = 1
EXIT_USAGE = 2


def _message(error: BaseException) -> str:
    return str(error)


@dataclass(frozen=True)
class ErrorExit:
    """Exceptions of `types` end the command with `status`, described by `describe`."""

    types: tuple[type[BaseException], ...]
    status: int
    describe: Callable[[BaseException], str] = _message


def one_line(text: str) -> str:
    """`text` on one line (an exception's message may span several)."""
    return " ".join(text.split())


def run_command(
    prog: str,
    body: Callable[[], int],
    errors: Sequence[ErrorExit] = (),
    stderr: TextIO | None = None,
    debug: Callable[[], bool] = lambda: False,
    json_logs: Callable[[], bool] = lambda: False,
) -> int:
    """`body()`'s status, or the status of the first `errors` row its exception matches.

    Args:
        prog: the command's name, the line's prefix (``edl-agent``).
        body: the command; returns its exit status.
        errors: the command's own exceptions, in order; `ConfigError` needs no row.
        stderr: where the line goes (the process's stderr when None).
        debug: asked after an unexpected error: whether to print its traceback too.
        json_logs: asked after an error: whether the line is a JSON log record
            (`edl_common.logs.json_chosen`).
    """
    rows = [ErrorExit((ConfigError,), EXIT_USAGE), *errors]
    try:
        return body()
    except Exception as error:
        out = stderr if stderr is not None else sys.stderr
        status, message, trace = EXIT_FAILURE, "", None
        for row in rows:
            if isinstance(error, row.types):
                status, message = row.status, one_line(row.describe(error))
                break
        else:
            message = f"unexpected {type(error).__name__}: {one_line(str(error))}"
            if debug():
                trace = "".join(traceback.format_exception(error))
        if json_logs():
            print(json_line(time.time(), "error", prog, message, trace), file=out)
        else:
            print(f"{prog}: error: {message}", file=out)
            if trace is not None:
                print(trace, file=out, end="")
        return status
