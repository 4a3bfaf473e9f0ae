"""Durations as Go writes them in the kubelet's events and as our command line reads them."""

from __future__ import annotations

import pytest

from localcluster import InvalidInput
from localcluster._internal.apimachinery.durations import go_duration, parse_duration


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.0, "0s"),
    (0.0004, "0s"),          # truncated to the millisecond, as the kubelet truncates pull times
    (0.45, "450ms"),
    (1.5, "1.5s"),
    (12.345, "12.345s"),
    (59.9999, "59.999s"),
    (60.0, "1m0s"),
    (182.1, "3m2.1s"),       # the example: "Successfully pulled image ... in 3m2.1s"
    (3600.0, "1h0m0s"),
    (3723.25, "1h2m3.25s"),
])
def test_go_duration_matches_go_time_duration_string(seconds: float, shown: str) -> None:
    assert go_duration(seconds) == shown


@pytest.mark.parametrize(("text", "seconds"), [
    ("60s", 60.0), ("3m", 180.0), ("1m30s", 90.0), ("2.5s", 2.5), ("500ms", 0.5), ("1.5h", 5400.0),
    ("60", 60.0), (".5s", 0.5), ("0", 0.0),
])
def test_parse_duration_reads_go_durations_and_plain_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "x", "1x", "-1", "s", "1m 3s", "5 minutes", "nan"])
def test_parse_duration_refuses_what_is_no_duration_naming_the_option(text: str) -> None:
    with pytest.raises(InvalidInput, match="--for"):
        parse_duration(text, what="--for")
