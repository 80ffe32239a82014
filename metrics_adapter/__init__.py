"""EDL metrics adapter: Kubernetes custom and external metrics APIs for training jobs."""

from __future__ import annotations

import sys

from edl_common.error_boundary import EXIT_FAILURE
from edl_common.version import edl_version, install_command

__version__ = edl_version()

ADAPTER_MODULES = frozenset({"flask", "werkzeug", "cryptography", "cachetools"})
"""Import names of the ``adapter`` extra (pyproject.toml): the base install, which a training
image carries, has none of them."""


def main() -> int:
    """Entry point of ``edl-adapter``: the CLI, or one line naming the extra it lacks.

    The import is here, not at the top, so that an install without the ``adapter`` extra ends
    with that line instead of a traceback from deep inside the server's imports.
    """
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
