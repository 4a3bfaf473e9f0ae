"""Horovod/OpenMPI hostfiles: one `HOST slots=N` line per host, sorted, exactly the form horovodrun parses.

Horovod parses hostfiles naively, so we write only that form and parse it strictly: anything else is an error
naming the line, never silently skipped.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from distributetrain.errors import InvalidInput

_LINE = re.compile(r"^(?P<host>\S+)\s+slots=(?P<slots>\d+)$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")


@dataclass(frozen=True, order=True)
class HostSlots:
    """One host (pod IP or name) and how many processes (GPUs) it runs."""

    host: str
    slots: int


def _sort_key(entry: HostSlots) -> tuple[int, object, str]:
    # IPs in numeric order (10.0.0.9 before 10.0.0.10), then names; deterministic for equal inputs
    try:
        address = ipaddress.ip_address(entry.host)
    except ValueError:
        return (2, 0, entry.host)
    return (address.version // 6, int(address), entry.host)


def _check(entry: HostSlots) -> None:
    if not entry.host or not (_HOSTNAME.match(entry.host) or _is_ip(entry.host)):
        raise InvalidInput(f"hostfile: {entry.host!r} is not a host name or IP address")
    if isinstance(entry.slots, bool) or not isinstance(entry.slots, int) or entry.slots < 1:
        raise InvalidInput(f"hostfile: host {entry.host} needs at least 1 slot, got {entry.slots!r}")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def sort_hosts(entries: Iterable[HostSlots]) -> list[HostSlots]:
    """Entries sorted by address; a host given twice is an error (its slots would be double-counted)."""
    ordered = sorted(entries, key=_sort_key)
    for entry in ordered:
        _check(entry)
    hosts = [e.host for e in ordered]
    duplicates = sorted({h for h in hosts if hosts.count(h) > 1})
    if duplicates:
        raise InvalidInput(f"hostfile: host(s) listed twice: {', '.join(duplicates)}")
    return ordered


def render(entries: Iterable[HostSlots]) -> str:
    """The hostfile text: `HOST slots=N` lines, sorted, newline-terminated."""
    return "".join(f"{e.host} slots={e.slots}\n" for e in sort_hosts(entries))


def parse(text: str) -> list[HostSlots]:
    """Parse a hostfile; blank lines and `#` comments are allowed, any other deviation is an error."""
    entries: list[HostSlots] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise InvalidInput(f"hostfile line {number}: {raw!r} is not 'HOST slots=N'")
        entry = HostSlots(match["host"], int(match["slots"]))
        try:
            _check(entry)
        except InvalidInput as err:
            raise InvalidInput(f"hostfile line {number}: {err}") from None
        entries.append(entry)
    return sort_hosts(entries)


def total_slots(entries: Iterable[HostSlots]) -> int:
    return sum(e.slots for e in entries)
