"""Kubernetes resource quantities ("8", "500m", "2Gi", "1e3") as exact fractions."""

from __future__ import annotations

import functools
import re
from fractions import Fraction

from distributetrain.errors import InvalidQuantity

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(value: str | int | float, *, what: str = "quantity") -> Fraction:
    """Parse a quantity exactly; `what` names the field in the error message."""
    if isinstance(value, bool):
        raise InvalidQuantity(f"{what}: {value!r} is not a Kubernetes quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    amount = _parse_text(str(value))
    if amount is None:
        raise InvalidQuantity(f"{what}: {value!r} is not a Kubernetes quantity (examples: 8, 500m, 2Gi)")
    return amount


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction | None:
    """The quantity `text` stands for, None when it is none. Cached: a cluster's pods repeat a few strings
    ("100m", "64Mi", "1"), and the inventory of 150,000 pods would otherwise run the regex and build the
    same Fractions for every container (Fractions are immutable, so sharing one is safe). Bounded, as the
    strings come from the cluster."""
    match = _QUANTITY.match(text.strip())
    if not match:
        return None
    number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent:
        return amount * Fraction(10) ** int(exponent[1:])
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    return amount * _DECIMAL[suffix or ""]


def parse_count(value: str | int | float, *, what: str) -> int:
    """Parse a quantity that must be whole, such as a GPU count: a fraction is an error, never rounded."""
    amount = parse_quantity(value, what=what)
    if amount.denominator != 1:
        raise InvalidQuantity(f"{what}: {value!r} is not a whole number; extended resources such as GPUs "
                              "cannot be requested in fractions")
    if amount < 0:
        raise InvalidQuantity(f"{what}: {value!r} is negative")
    return int(amount)


def format_quantity(amount: Fraction) -> str:
    """The shortest exact string for `amount`: whole numbers plainly, else milli-units."""
    if amount.denominator == 1:
        return str(amount.numerator)
    milli = amount * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(amount))
