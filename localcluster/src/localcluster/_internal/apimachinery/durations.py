"""Durations as Go writes and reads them (the `time` package): what the kubelet prints in its events
("Successfully pulled image ... in 3m2.1s") and what our command line takes (`--for 60s`, `--pull-time
IMAGE=3m`). Pure.

- `go_duration(seconds)` is Go's `time.Duration.String()` of a duration already truncated to the
  millisecond, as the kubelet truncates pull times: `0s`, `450ms`, `1.5s`, `1m0s`, `3m2.1s`, `1h0m0s`.
- `parse_duration(text)` reads Go's `time.ParseDuration` forms (`90s`, `1m30s`, `1.5h`, `250ms`) and, for
  people, a plain number of seconds (`60`).
"""

from __future__ import annotations

import re

from localcluster._internal.errors import InvalidInput

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in `text` (`60s`, `3m`, `1m30s`, `2.5s`, `500ms`, or `60` for seconds); InvalidInput naming
    `what` otherwise. Negative durations are refused: a fault or a pull cannot last less than nothing."""
    value = text.strip()
    if not value:
        raise InvalidInput(f"{what}: expected a duration like 60s, 3m or 1m30s, got nothing")
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if seconds < 0 or seconds != seconds or seconds == float("inf"):
            raise InvalidInput(f"{what} {text!r}: expected 0 or more seconds")
        return seconds
    position, total = 0, 0.0
    for match in _PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(value) or position == 0:
        raise InvalidInput(f"{what} {text!r}: expected a duration like 60s, 3m, 1m30s or 500ms "
                           "(units h, m, s, ms)")
    return total


def _trimmed(value: float, digits: int) -> str:
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return text or "0"


def go_duration(seconds: float) -> str:
    """Go's Duration.String() of `seconds` truncated to the millisecond (as the kubelet truncates)."""
    millis = int(max(seconds, 0.0) * 1000 + 1e-6)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = _trimmed(rest / 1000, 3) + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs
