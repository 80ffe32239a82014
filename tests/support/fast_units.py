"""The fast unit layer stays fast: a unit test not marked ``slow`` may not start a process or
import a training framework.

``pytest tests/unit -m "unit and not slow"`` is the loop a developer runs after every change
(under a minute on the shared 2-core machine). A process start (the CLI run as a subprocess,
`helm`, `promtool`, an agent) costs a second or more on a loaded machine, and importing torch
or Paddle several; a test that does either belongs to ``slow``. :func:`guarded` makes that
rule fail the test that breaks it, naming what it did, instead of slowing the loop unnoticed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

FRAMEWORKS = ("torch", "paddle")
"""Top-level modules a fast unit test may not be the first to import."""


class SlowUnitTest(AssertionError):
    """A unit test not marked ``slow`` started a process or imported a framework."""


@contextlib.contextmanager
def guarded(test: str) -> Iterator[None]:
    """Inside, starting a process raises :class:`SlowUnitTest`; a framework first imported
    inside fails at the end."""
    before = {name for name in FRAMEWORKS if name in sys.modules}
    original_execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    original_fork = os.fork

    def execute(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> Any:
        raise SlowUnitTest(f"{test} starts a process ({args!r}): mark it pytest.mark.slow")

    def fork() -> int:
        raise SlowUnitTest(f"{test} forks a process: mark it pytest.mark.slow")

    subprocess.Popen._execute_child = execute  # type: ignore[attr-defined]
    os.fork = fork
    try:
        yield
    finally:
        subprocess.Popen._execute_child = original_execute  # type: ignore[attr-defined]
        os.fork = original_fork
    imported = [n for n in FRAMEWORKS if n in sys.modules and n not in before]
    if imported:
        raise SlowUnitTest(f"{test} imports {', '.join(imported)}: mark it pytest.mark.slow")
