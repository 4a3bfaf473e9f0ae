"""Kubernetes quantities: exact parsing, whole counts for GPUs, and formatting."""

from __future__ import annotations

from fractions import Fraction

import pytest

from distributetrain.errors import InvalidInput, InvalidQuantity
from distributetrain.quantity import format_quantity, parse_count, parse_quantity


@pytest.mark.parametrize(("text", "expected"), [
    ("8", Fraction(8)),
    ("0", Fraction(0)),
    ("+3", Fraction(3)),
    ("-2", Fraction(-2)),
    ("500m", Fraction(1, 2)),
    ("1000m", Fraction(1)),
    ("250u", Fraction(1, 4000)),
    ("5n", Fraction(5, 10**9)),
    ("1k", Fraction(1000)),
    ("100M", Fraction(10**8)),
    ("2G", Fraction(2 * 10**9)),
    ("2E", Fraction(2 * 10**18)),
    ("1Ki", Fraction(1024)),
    ("2Gi", Fraction(2 * 2**30)),
    ("1.5Gi", Fraction(3 * 2**29)),
    ("1Ei", Fraction(2**60)),
    (".5", Fraction(1, 2)),
    ("1.", Fraction(1)),
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("1e-3", Fraction(1, 1000)),
    ("12e+2", Fraction(1200)),
    (" 4 ", Fraction(4)),
    (7, Fraction(7)),
    (0.25, Fraction(1, 4)),
    (0.1, Fraction(1, 10)),  # exact decimal, not the binary float
])
def test_parse_quantity(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1K", "1e", "--1", "1 Gi", "Gi", "1.2.3", "0x10", "1gi", True])
def test_parse_quantity_rejects_what_kubernetes_rejects(text: str) -> None:
    with pytest.raises(InvalidQuantity, match="is not a Kubernetes quantity") as caught:
        parse_quantity(text, what="node n1 status.allocatable.nvidia.com/gpu")
    assert str(caught.value).startswith("node n1 status.allocatable.nvidia.com/gpu:")
    assert isinstance(caught.value, InvalidInput)


def test_a_quantity_parsed_again_is_the_same_amount() -> None:
    """The parser caches each string (a cluster's pods repeat a few): the second answer, from the cache,
    is the first's, for every quantity of the table above, read in two rounds."""
    texts = ["100m", "64Mi", "1", "1.5Gi", "1e3", " 4 ", "250u", "2E", "500m", "64Mi", "100m"]
    first = [parse_quantity(text) for text in texts]
    again = [parse_quantity(text) for text in reversed(texts)]
    assert again[::-1] == first
    mebi64 = Fraction(64 * 2**20)
    assert first == [Fraction(1, 10), mebi64, Fraction(1), Fraction(3 * 2**29), Fraction(1000), Fraction(4),
                     Fraction(1, 4000), Fraction(2 * 10**18), Fraction(1, 2), mebi64, Fraction(1, 10)]


def test_an_invalid_quantity_names_its_own_field_each_time() -> None:
    """A string refused once is refused again, each time naming the field it was read from."""
    for field in ("container 'main' limits.cpu", "container 'sidecar' requests.memory"):
        with pytest.raises(InvalidQuantity, match=f"^{field}: '12 cores' is not a Kubernetes quantity"):
            parse_quantity("12 cores", what=field)


@pytest.mark.parametrize(("text", "expected"),
                         [("8", 8), ("0", 0), ("1000m", 1), ("2k", 2000), (3, 3), ("1e1", 10)])
def test_parse_count(text: str | int, expected: int) -> None:
    value = parse_count(text, what="gpus")
    assert value == expected
    assert isinstance(value, int)


@pytest.mark.parametrize(("text", "message"), [
    ("500m", "not a whole number"),
    ("1.5", "not a whole number"),
    ("0.5", "not a whole number"),
    (1.5, "not a whole number"),
    ("-1", "negative"),
    ("two", "not a Kubernetes quantity"),
])
def test_parse_count_refuses_fractions_and_negatives(text: str | float, message: str) -> None:
    with pytest.raises(InvalidQuantity, match=message) as caught:
        parse_count(text, what="pod ml/train-0 nvidia.com/gpu")
    assert "pod ml/train-0 nvidia.com/gpu" in str(caught.value)


@pytest.mark.parametrize(("amount", "expected"), [
    (Fraction(8), "8"),
    (Fraction(0), "0"),
    (Fraction(3, 2), "1500m"),
    (Fraction(1, 1000), "1m"),
    (Fraction(1, 3), str(1 / 3)),
])
def test_format_quantity(amount: Fraction, expected: str) -> None:
    assert format_quantity(amount) == expected


@pytest.mark.parametrize("text", ["8", "1500m", "1m", "2000"])
def test_format_then_parse_round_trips(text: str) -> None:
    assert parse_quantity(format_quantity(parse_quantity(text))) == parse_quantity(text)
