"""The installed distribution's name and version: ``--version``, build_info, install hints."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "edl-k8s"
"""The name EDL installs under (``edl`` on PyPI is another project); pyproject.toml's too."""


def edl_version() -> str:
    """The distribution's version; ``0+unknown`` in a source tree that was never installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def install_command(extra: str) -> str:
    """The pip command that adds ``extra``, for an error that says what is missing."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
