"""Kubernetes ``resource.Quantity`` strings in canonical DecimalSI form (``"850m"``, ``"12k"``)."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

_SUFFIXES = (
    ("E", 27),
    ("P", 24),
    ("T", 21),
    ("G", 18),
    ("M", 15),
    ("k", 12),
    ("", 9),
    ("m", 6),
    ("u", 3),
    ("n", 0),
)
_MAX_NANO = (2**63 - 1) * 10**9


def format_quantity(value: float) -> str:
    """Render ``value`` as a canonical Quantity string.

    Values of magnitude 1 or more are rounded to milli-units (what the HPA reads, via
    ``MilliValue()``); smaller ones keep up to nano precision so that e.g. a 400 µs step time
    is ``"400u"`` rather than ``"0"``.

    The canonical form uses the largest SI suffix that keeps the number integral, as
    Kubernetes does: ``0.85`` is ``"850m"``, ``12000`` is ``"12k"``, ``1.5`` is ``"1500m"``.

    Raises:
        ValueError: for NaN or infinite values, which have no Quantity form.
    """
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no Quantity form")
    nanos = int(Decimal(repr(value)).scaleb(9).to_integral_value(rounding=ROUND_HALF_UP))
    nanos = max(-_MAX_NANO, min(_MAX_NANO, nanos))
    if abs(nanos) >= 10**9:
        nanos = int((Decimal(nanos) / 10**6).to_integral_value(rounding=ROUND_HALF_UP)) * 10**6
    if nanos == 0:
        return "0"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    for suffix, exponent in _SUFFIXES:
        unit = 10**exponent
        if magnitude % unit == 0:
            return f"{sign}{magnitude // unit}{suffix}"
    raise AssertionError("unreachable: every integer is a multiple of 1")


def parse_quantity(text: str) -> float:
    """Parse a DecimalSI Quantity string back to a float (for tests and tools)."""
    factors = {
        "n": 1e-9,
        "u": 1e-6,
        "m": 1e-3,
        "": 1.0,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "P": 1e15,
        "E": 1e18,
    }
    suffix = text[-1] if text and text[-1].isalpha() else ""
    number = text[: len(text) - len(suffix)]
    if suffix not in factors:
        raise ValueError(f"unknown Quantity suffix in {text!r}")
    return float(number) * factors[suffix]
