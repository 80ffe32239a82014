"""The process environment as a test found it, given back when the test ends.

Code under test may set variables in ``os.environ`` on purpose: an in-process trainer exports
its world (``EDL_GENERATION``, ``RANK``, ``MASTER_ADDR``...) for user code that reads the
environment. Left there, they reached later tests in the same process (a CLI warned about
``EDL_GENERATION`` and 29 unit tests failed in one fresh-clone run), so which tests pass
depended on the order they ran in.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, MutableMapping


@contextlib.contextmanager
def restored_environment(environ: MutableMapping[str, str] | None = None) -> Iterator[None]:
    """On exit ``environ`` (default ``os.environ``) holds exactly what it held on entry."""
    env = os.environ if environ is None else environ
    saved = dict(env)
    try:
        yield
    finally:
        for name in [n for n in env if n not in saved]:
            del env[name]
        for name, value in saved.items():
            if env.get(name) != value:
                env[name] = value
