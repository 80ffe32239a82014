"""Kubernetes ``resource.Quantity`` strings: canonical output and exact parsing.

The adapter writes values (``"850m"``, ``"12k"``); the HPA model reads them exactly, because
the controller does all its maths in milli-units. Parsing checks apimachinery's grammar
(``pkg/api/resource/quantity.go``: ``1E`` is 10^18, ``1e3`` an exponent, ``2Ki`` binary) and
leaves the arithmetic to the Kubernetes client's ``parse_quantity``, so EDL reads a Quantity
exactly as the Python client does.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

from kubernetes.utils.quantity import parse_quantity as _kube_parse_quantity

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


class QuantityError(ValueError):
    """A string is not a Kubernetes resource.Quantity."""


_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


def parse_quantity(text: str | int | float) -> Decimal:
    """Return the exact decimal value of a Quantity such as `850m`, `1.5`, `2Ki` or `1e3`."""
    raw = str(text).strip()
    if isinstance(text, float) and not math.isfinite(text):
        raise QuantityError(f"quantity {raw!r} is not finite")
    if _PATTERN.match(raw) is None:
        raise QuantityError(f"{raw!r} is not a Kubernetes quantity (e.g. 850m, 2, 1.5k, 2Ki)")
    try:
        value: Decimal = _kube_parse_quantity(raw)  # type: ignore[no-untyped-call]
    except ValueError as e:  # pragma: no cover - the grammar above already filters this
        raise QuantityError(f"{raw!r} is not a Kubernetes quantity: {e}") from e
    return value


def milli_value(text: str | int | float | Decimal) -> int:
    """Return `Quantity.MilliValue()`: the value in thousandths, rounded away from zero."""
    value = text if isinstance(text, Decimal) else parse_quantity(text)
    scaled = value * 1000
    magnitude = abs(scaled).to_integral_value(rounding=ROUND_CEILING)
    return int(magnitude) if scaled >= 0 else -int(magnitude)


def format_milli(milli: int) -> str:
    """Render a milli-value the way the API server prints it: `850m`, `2`, `1500m`."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"
