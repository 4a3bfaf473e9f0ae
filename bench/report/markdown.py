"""The report's smallest parts, shared by every section: a Markdown table, and the line that says when and how
a section was measured (runs.json). Imports nothing of bench, so every renderer can use it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def provenance(run: Mapping[str, Any] | None) -> str:
    """When and how a section was measured, from runs.json."""
    if not run:
        return "When it was measured is not recorded."
    load = run.get("load_average_1m")
    after = "" if load is None else f", 1-minute load average {load} at the end"
    return (f"Measured {run.get('date', '?')} on commit `{run.get('commit', '?')}` by "
            f"`{run.get('command', '?')}` ({run.get('cpu', '?')}, {run.get('cores', '?')} cores{after}).")
