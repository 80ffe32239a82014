"""A warning for ``EDL_*`` variables no option reads: a misspelt one is otherwise ignored.

``EDL_SCRAPE_INTERVL=2s`` silently leaves the default in place; this names it and the closest
known variable, once, at start.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

PREFIX = "EDL_"


def unknown_variables(env: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """One warning line per ``EDL_*`` name in `env` that is not in `known` (sorted)."""
    names = set(known)
    lines = []
    for name in sorted(k for k in env if k.startswith(PREFIX) and k not in names):
        close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"unknown environment variable {name} is ignored{hint}")
    return lines
