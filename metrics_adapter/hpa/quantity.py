"""Kubernetes `resource.Quantity` parsing, because the HPA does all its maths in milli-units."""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from metrics_adapter.hpa.errors import QuantityError

_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(text: str | int | float) -> Decimal:
    """Return the exact decimal value of a Quantity such as `850m`, `1.5`, `2Ki` or `1e3`."""
    raw = str(text).strip()
    if isinstance(text, float) and not math.isfinite(text):
        raise QuantityError(f"quantity {raw!r} is not finite")
    match = _PATTERN.match(raw)
    if match is None:
        raise QuantityError(f"{raw!r} is not a Kubernetes quantity (e.g. 850m, 2, 1.5k)")
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation as e:  # pragma: no cover - the regex already filters this
        raise QuantityError(f"{raw!r} is not a number") from e
    suffix = match.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix and suffix[0] in "eE":
        return number.scaleb(int(suffix[1:]))
    return number * _DECIMAL[suffix]


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
