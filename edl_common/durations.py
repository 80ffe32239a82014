"""Durations as Kubernetes writes them (Go's ``time.ParseDuration``), or plain seconds.

``1m30s``, ``5m0s``, ``300ms``, ``1.5h``, ``2h45m``; a bare number (``90``, ``0.5``) is seconds,
as EDL's options always accepted. Units: ``ns``, ``us`` (``µs``), ``ms``, ``s``, ``m``, ``h``.
"""

from __future__ import annotations

import math
import re

from edl_common.errors import ConfigError

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
EXAMPLES = "e.g. 300ms, 5s, 1m30s"


def parse_duration(text: str | float | int, *, allow_zero: bool = False) -> float:
    """Seconds of `text`: a Go duration (``1m30s``) or a number of seconds (``90``).

    Raises:
        ConfigError: not a duration, negative, or zero without `allow_zero`.
    """
    if isinstance(text, bool):
        raise ConfigError(f"invalid duration {text!r} ({EXAMPLES})")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        seconds = _parse_text(str(text).strip())
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"invalid duration {text!r}: must be >= 0 ({EXAMPLES})")
    if seconds == 0 and not allow_zero:
        raise ConfigError(f"{text!r}: must be > 0")
    return seconds


def _parse_text(raw: str) -> float:
    try:
        return float(raw)  # NaN and infinities are refused by the caller
    except ValueError:
        pass
    body = raw[1:] if raw.startswith("+") else raw
    pos, seconds = 0, 0.0
    for match in _PART.finditer(body):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not body or pos != len(body):
        raise ConfigError(f"invalid duration {raw!r} ({EXAMPLES})")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds in the Go form Kubernetes prints: ``1m30s``, ``5m0s``, ``300ms``, ``0s``."""
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"{seconds!r} is not a duration >= 0")
    if seconds == 0:
        return "0s"
    if seconds < 1:
        millis = seconds * 1000
        return f"{millis:g}ms" if millis >= 1 else f"{seconds * 1e6:g}us"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{round(secs, 9):g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return text
