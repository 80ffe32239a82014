"""Reads Kubernetes Quantity strings ("850m", "12", "1500k") as Decimals, for assertions."""

from __future__ import annotations

from decimal import Decimal

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "Ki": Decimal(1024),
    "Mi": Decimal(1024**2),
    "Gi": Decimal(1024**3),
}


def parse_quantity(text: str) -> Decimal:
    """`"850m"` -> Decimal("0.850"); raises ValueError on anything else."""
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * _SUFFIX[suffix]
    try:
        return Decimal(text)
    except ArithmeticError as e:
        raise ValueError(f"not a Quantity: {text!r}") from e
