"""The installed distribution's version, for every CLI's ``--version`` and build_info."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def edl_version() -> str:
    """``edl``'s version; ``0+unknown`` in a source tree that was never installed."""
    try:
        return version("edl")
    except PackageNotFoundError:
        return "0+unknown"
