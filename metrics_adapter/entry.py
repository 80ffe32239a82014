"""The ``edl-adapter`` console script: the CLI, or one line naming the extra it lacks.

The base install of ``edl-k8s`` is what a training image carries (the agent and the trainer
library); the adapter's server libraries are the ``adapter`` extra. This module imports none
of them, so that running the adapter without the extra ends with that one line instead of a
traceback from deep inside the server's imports.
"""

from __future__ import annotations

import sys

from edl_common.error_boundary import EXIT_FAILURE
from edl_common.version import install_command

ADAPTER_MODULES = frozenset({"flask", "werkzeug", "cryptography", "cachetools", "msgspec"})
"""Import names of the ``adapter`` extra (pyproject.toml; a unit test keeps both in step)."""


def main() -> int:
    """Entry point of ``edl-adapter`` (and ``python -m metrics_adapter``)."""
    try:
        from metrics_adapter.cli import main as cli_main
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing not in ADAPTER_MODULES:
            raise
        sys.stderr.write(
            f"edl-adapter: error: {missing} is not installed: the adapter needs the adapter "
            f"extra ({install_command('adapter')})\n"
        )
        return EXIT_FAILURE
    return cli_main()
