"""EDL per-pod agent: supervises the trainer, records and exports training metrics."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """``agent.__version__``, read on first use.

    Reading the installed distribution's metadata imports `importlib.metadata` (with the email
    parser): tens of milliseconds that every trainer importing `agent.trainer` and every agent
    would otherwise pay at start, on a joiner's way to its first step.
    """
    if name == "__version__":
        from edl_common.version import edl_version

        return edl_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
