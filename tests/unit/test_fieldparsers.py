"""The request's field parsers that the `plan` and `inventory` commands share with `run`."""

from __future__ import annotations

import pytest

from distributetrain.errors import InvalidInput
from distributetrain.request.fieldparsers import parse_node_selector


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([], {}),
        (["gpu-type=a100"], {"gpu-type": "a100"}),
        (["gpu-type=a100", "zone=a"], {"gpu-type": "a100", "zone": "a"}),
        (["gpu-type=a100,zone=a"], {"gpu-type": "a100", "zone": "a"}),
        (["empty="], {"empty": ""}),
    ],
)
def test_parse_node_selector(items: list[str], expected: dict[str, str]) -> None:
    assert parse_node_selector(items) == expected


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["gpu-type"], "'gpu-type' is not KEY=VALUE"),
        (["=a100"], "is not KEY=VALUE"),
        (["zone=a", "zone=b"], "zone is given twice"),
    ],
)
def test_parse_node_selector_errors(items: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_node_selector(items)


@pytest.mark.parametrize(
    ("value", "message"),
    [(["bad key=x"], "name 'bad key' must be"), (["k=bad value!"], "label value 'bad value!'")],
)
def test_node_selector_keys_and_values_are_labels(value: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_node_selector(value)


def test_node_selector_from_env_or_mapping() -> None:
    assert parse_node_selector("zone=a,gpu-type=a100") == {"zone": "a", "gpu-type": "a100"}
    assert parse_node_selector({"zone": "a"}) == {"zone": "a"}
    assert parse_node_selector(["", " "]) == {}


def test_one_gpu_rule() -> None:
    from distributetrain.request.fieldparsers import MAX_GPUS, check_gpus, parse_gpus

    assert parse_gpus("+6") == check_gpus(6) == 6
    for bad, message in ((0, "at least 1 GPU"), (MAX_GPUS + 1, "beyond the sane cap")):
        with pytest.raises(ValueError, match=message):
            check_gpus(bad)
    with pytest.raises(ValueError, match="'0': at least 1 GPU is needed"):
        parse_gpus("0")


@pytest.mark.parametrize(("text", "seconds"), [("120", 120.0), ("90s", 90.0), ("2m", 120.0),
                                               ("1h30m", 5400.0), ("1.5h", 5400.0), ("500ms", 0.5),
                                               ("1d", 86400.0)])
def test_one_duration_grammar_for_the_request_and_the_chief(text: str, seconds: float) -> None:
    from distributetrain.chief import settings
    from distributetrain.request.fieldparsers import parse_duration

    assert parse_duration(text) == settings.parse_duration(text, name="x") == seconds


@pytest.mark.parametrize("text", ["soon", "-5", "5x", "1h 30m", "nan"])
def test_one_duration_grammar_refuses_the_same(text: str) -> None:
    from distributetrain.chief import settings
    from distributetrain.request.fieldparsers import parse_duration

    with pytest.raises(ValueError):
        parse_duration(text)
    with pytest.raises(InvalidInput, match=f"x: {text!r}"):
        settings.parse_duration(text, name="x")
