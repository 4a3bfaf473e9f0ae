"""bench/report/docblocks.py: the measured numbers in docs/planner.md and docs/manager.md come from the
results."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.report import docblocks

ROOT = Path(__file__).resolve().parents[2]


def _doc(body: str = "old numbers") -> str:
    return ("# Title\n\nprose before\n\n"
            f"<!-- bench:planner_speed:begin (anything) -->\n{body}\n<!-- bench:planner_speed:end -->\n\n"
            "prose after\n")


def test_replace_block_rewrites_only_between_the_markers() -> None:
    text = docblocks.replace_block(_doc(), "planner_speed", "new numbers\n")
    assert "old numbers" not in text and "new numbers" in text
    assert text.startswith("# Title\n\nprose before\n\n") and text.endswith("\n\nprose after\n")
    assert docblocks.replace_block(text, "planner_speed", "new numbers") == text  # idempotent


@pytest.mark.parametrize("text", ["no markers at all", _doc() + _doc()])
def test_replace_block_refuses_missing_or_repeated_markers(text: str) -> None:
    with pytest.raises(ValueError, match="bench:planner_speed"):
        docblocks.replace_block(text, "planner_speed", "x")


def test_update_renders_each_block_from_the_results_with_its_provenance(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "planner.md").write_text(_doc())
    manager = "".join(_doc().replace("planner_speed", name) for name in ("manager_overhead", "demo_phases"))
    (tmp_path / "docs" / "manager.md").write_text(manager)
    speed = {"planner_speed": {"markdown": "PLANNER TABLE"}, "demo_phases": {"skipped": "quick mode"}}
    runs = {"planner_speed": {"date": "2030-01-02 03:04 UTC", "commit": "abc",
                              "command": "python -m bench.run"}}

    changed = docblocks.update(tmp_path, speed, runs)

    assert sorted(p.name for p in changed) == ["manager.md", "planner.md"]
    planner = (tmp_path / "docs" / "planner.md").read_text()
    assert "PLANNER TABLE" in planner and "Measured 2030-01-02 03:04 UTC on commit `abc`" in planner
    manager = (tmp_path / "docs" / "manager.md").read_text()
    assert "old numbers" not in manager
    assert "Not measured yet: `python -m bench.run --only manager_overhead`" in manager
    assert "Not measured yet: `python -m bench.run --only demo_phases`" in manager
    assert docblocks.update(tmp_path, speed, runs) == []  # nothing changes a second time


def test_the_real_docs_have_every_block() -> None:
    for relative, blocks in docblocks.BLOCKS.items():
        text = (ROOT / relative).read_text()
        for name in blocks:
            docblocks.replace_block(text, name, "x")  # raises if the markers are missing
