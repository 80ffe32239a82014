"""Parsing of duration strings such as ``"500ms"``, ``"5s"``, ``"1m30s"`` into seconds."""

from __future__ import annotations

import re

from metrics_adapter.errors import ConfigError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int) -> float:
    """Return seconds for a Go-style duration string or a bare number of seconds.

    Raises:
        ConfigError: when the text is not a positive duration.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        raw = str(text).strip()
        try:
            seconds = float(raw)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(raw):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if pos != len(raw) or not raw:
                raise ConfigError(f"invalid duration {text!r} (use e.g. 500ms, 5s, 1m)") from None
    if not seconds > 0:
        raise ConfigError(f"duration {text!r} must be positive")
    return seconds
