"""Kubernetes resource quantities, as k8s.io/apimachinery/pkg/api/resource reads them, as exact fractions.

A quantity is `<signedNumber><suffix>`: the suffix is a binary SI one (Ki Mi Gi Ti Pi Ei), a decimal SI one
(n u m "" k M G T P E) or a decimal exponent (e3, E-2). The server validates, defaults and schedules with
these; it does not borrow the client's parser (kubernetes.utils), so the server and the client under test can
disagree where one of them is wrong.
"""

from __future__ import annotations

import re
from fractions import Fraction

from localcluster._internal.errors import InvalidQuantity

_BINARY_SI = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}          # powers of 1024
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_GRAMMAR = re.compile(r"(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
                      r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE])?)")


def parse_quantity(value: str | int | float, *, what: str = "quantity") -> Fraction:
    """The exact amount of `value`; `what` names the field in the error message."""
    if isinstance(value, bool):  # YAML's `true` is no quantity, though Python counts it as an int
        raise InvalidQuantity(f"{what}: {value!r} is not a Kubernetes quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    match = _GRAMMAR.fullmatch(str(value).strip())
    if match is None:
        raise InvalidQuantity(f"{what}: {value!r} is not a Kubernetes quantity (examples: 8, 500m, 2Gi)")
    number = Fraction(match["number"])
    if match["exponent"]:
        return number * Fraction(10) ** int(match["exponent"][1:])
    suffix = match["suffix"] or ""
    if suffix in _BINARY_SI:
        return number * Fraction(1024) ** _BINARY_SI[suffix]
    return number * Fraction(10) ** _DECIMAL_SI[suffix]


def parse_count(value: str | int | float, *, what: str) -> int:
    """A quantity that must be a whole, non-negative number (a GPU count): never rounded."""
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


_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def is_binary(value: str | int | float) -> bool:
    """Whether `value` was written with a binary suffix (2Gi): Quantity.String() then keeps that format."""
    return isinstance(value, str) and value.strip().endswith("i")


def canonical(amount: Fraction, *, binary: bool = False) -> str:
    """What Quantity.String() prints: in the binary format (1536Mi) when the amount was written in it, is
    whole and at least 1024; otherwise the decimal one, an integer mantissa with the largest suffix that keeps
    it whole (1500m, 2k, 1500). Amounts finer than a nano-unit round up, as the real parser does."""
    if amount == 0:
        return "0"
    sign, amount = ("-", -amount) if amount < 0 else ("", amount)
    if binary and amount >= 1024 and amount.denominator == 1:
        number, power = int(amount), 0
        while power < len(_BINARY_SUFFIXES) - 1 and number % 1024 == 0:
            number, power = number // 1024, power + 1
        return f"{sign}{number}{_BINARY_SUFFIXES[power]}"
    nanos = -(-amount.numerator * 10**9 // amount.denominator)  # ceiling
    exponent = -9
    while exponent < 18 and nanos % 1000 == 0:
        nanos, exponent = nanos // 1000, exponent + 3
    return f"{sign}{nanos}{_DECIMAL_SUFFIXES[exponent]}"
