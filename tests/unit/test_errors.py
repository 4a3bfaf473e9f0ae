"""The error hierarchy: the exit-code table, written once, and what the API errors carry."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from distributetrain.cli import main
from distributetrain.errors import EXIT_CODES

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"


def test_the_design_documents_exit_code_table_is_errors_py() -> None:
    section = DESIGN.read_text().split("## Exit codes", 1)[1]
    rows = re.findall(r"^\| (?!code |---)(.+?) \| (.+?) \|$", section, flags=re.MULTILINE)
    assert tuple(rows) == EXIT_CODES


def test_help_prints_every_exit_code() -> None:
    shown = CliRunner().invoke(main, ["--help"]).stdout
    for code, meaning in EXIT_CODES:
        assert f"{code:<9} {meaning}" in shown
