"""Measured numbers in the other docs, rendered from bench/results between marker comments.

docs/planner.md and docs/manager.md quote the speed benches; rather than copies that go stale, each quote
is a block between `<!-- bench:NAME:begin ... -->` and `<!-- bench:NAME:end -->` that `python -m bench.run`
rewrites from the results whenever it renders docs/benchmarks.md. Text outside the markers is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.report.markdown import provenance
from bench.report.speed_section import render as render_bench

BEGIN = ("<!-- bench:{name}:begin (python -m bench.run renders this block from bench/results; "
         "edits are lost) -->")
END = "<!-- bench:{name}:end -->"


def replace_block(text: str, name: str, body: str) -> str:
    """`text` with the block `name` holding `body`; a ValueError if its markers are missing or repeated."""
    key = re.escape(name)
    pattern = re.compile(rf"<!-- bench:{key}:begin[^>]*-->\n.*?<!-- bench:{key}:end -->", re.DOTALL)
    found = pattern.findall(text)
    if len(found) != 1:
        raise ValueError(f"expected one block bench:{name}, found {len(found)}")
    block = f"{BEGIN.format(name=name)}\n{body.strip()}\n{END.format(name=name)}"
    return pattern.sub(lambda _: block, text)


def _block(name: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], str]:
    def render(speed: Mapping[str, Any], runs: Mapping[str, Any]) -> str:
        result = speed.get(name)
        if not isinstance(result, Mapping) or "failed" in result or "skipped" in result:
            return f"Not measured yet: `python -m bench.run --only {name}`."
        text = render_bench(name, result) or ""
        return f"{provenance(runs.get(name))}\n\n{text}"
    return render


#: doc (relative to the repository) -> block name -> renderer(speed results, runs.json)
BLOCKS: dict[str, dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], str]]] = {
    "docs/planner.md": {"planner_speed": _block("planner_speed")},
    "docs/manager.md": {"manager_overhead": _block("manager_overhead"), "demo_phases": _block("demo_phases")},
}


def update(root: Path, speed: Mapping[str, Any], runs: Mapping[str, Any]) -> list[Path]:
    """Rewrite every block of BLOCKS under `root`; returns the docs that changed. A doc or block that is
    missing is reported, not created."""
    changed = []
    for relative, blocks in BLOCKS.items():
        path = root / relative
        if not path.exists():
            print(f"note: {relative} not found; its bench blocks were not rendered")
            continue
        text = original = path.read_text()
        for name, render in blocks.items():
            try:
                text = replace_block(text, name, render(speed, runs))
            except ValueError as err:
                print(f"note: {relative}: {err}; not rendered")
        if text != original:
            path.write_text(text)
            changed.append(path)
    return changed
