"""Hostfiles: exactly `HOST slots=N` lines, sorted, parsed strictly."""

from __future__ import annotations

import pytest

from distributetrain.errors import InvalidInput
from distributetrain.hostfile import HostSlots, parse, render, total_slots


def test_render_sorts_addresses_numerically() -> None:
    text = render([HostSlots("10.244.1.10", 1), HostSlots("10.244.1.9", 5), HostSlots("10.244.0.200", 2)])
    assert text == "10.244.0.200 slots=2\n10.244.1.9 slots=5\n10.244.1.10 slots=1\n"


def test_render_is_independent_of_input_order() -> None:
    entries = [HostSlots("10.0.0.3", 1), HostSlots("worker-b", 2), HostSlots("10.0.0.2", 4)]
    assert render(entries) == render(list(reversed(entries)))


def test_empty_hostfile_for_a_chief_alone() -> None:
    assert render([]) == ""
    assert parse("") == []


def test_parse_round_trip_with_comments_and_blank_lines() -> None:
    text = "# workers\n\n10.244.1.9 slots=5\n10.244.2.3   slots=3\n"
    entries = parse(text)
    assert entries == [HostSlots("10.244.1.9", 5), HostSlots("10.244.2.3", 3)]
    assert total_slots(entries) == 8
    assert parse(render(entries)) == entries


@pytest.mark.parametrize(("text", "fragment"), [
    ("10.0.0.1\n", "line 1: '10.0.0.1' is not 'HOST slots=N'"),
    ("10.0.0.1 slots=2\n10.0.0.2:4\n", "line 2"),
    ("10.0.0.1 slots=0\n", "at least 1 slot"),
    ("10.0.0.1 slots=-1\n", "is not 'HOST slots=N'"),
    ("10.0.0.1 slots=2 max_slots=4\n", "is not 'HOST slots=N'"),
    ("bad_host! slots=1\n", "not a host name or IP address"),
    ("10.0.0.1 slots=1\n10.0.0.1 slots=2\n", "listed twice: 10.0.0.1"),
])
def test_parse_is_strict(text: str, fragment: str) -> None:
    with pytest.raises(InvalidInput, match="hostfile") as caught:
        parse(text)
    assert fragment in str(caught.value)


def test_render_rejects_zero_slots() -> None:
    with pytest.raises(InvalidInput, match="at least 1 slot"):
        render([HostSlots("10.0.0.1", 0)])
