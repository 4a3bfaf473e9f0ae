"""Collate the fault matrix's measurements into the table of docs/reliability.md.

    .venv/bin/pytest tests/reliability          # each row writes $DT_RELIABILITY_RESULTS/<test>.json
    .venv/bin/python tests/reliability/collate.py [--write docs/reliability.md]

Without --write the table is printed; with it, the part of the file between the two marker lines is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(os.environ.get("DT_RELIABILITY_RESULTS", "/tmp/dt-reliability"))
BEGIN = "<!-- fault-matrix:begin (tests/reliability/collate.py) -->"
END = "<!-- fault-matrix:end -->"
# the order rows appear in, by test module
ORDER = ["test_pod_faults", "test_process_faults", "test_hangs", "test_preflight_links", "test_recovery",
         "test_drain_recovery",
         "test_manager_faults", "test_api_faults", "test_pull_and_drain_faults", "test_contention",
         "test_invalid_input", "test_security"]


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def _module(row: dict[str, Any]) -> int:
    module = row.get("module", "")
    return ORDER.index(module) if module in ORDER else len(ORDER)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| row | test | runtime | outcome | exit | time to detect (s) | time to clean up (s) "
             "| objects left | GPUs held | notes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (_module(r), r["test"])):
        left = "-" if r.get("objects_left") is None else str(r["objects_left"])
        gpus = "-" if r.get("gpus_held") is None else str(r["gpus_held"])
        code = "-" if r.get("exit_code") is None else str(r["exit_code"])
        lines.append(f"| {r['row']} | `{r['test']}` | {r['runtime']} | {r['outcome']} | {code} | "
                     f"{_seconds(r.get('detect_s'))} | {_seconds(r.get('cleanup_s'))} | {left} | {gpus} | "
                     f"{r.get('notes', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="replace the table between the markers in this file")
    args = parser.parse_args(argv)
    rows = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    if not rows:
        print(f"no results in {RESULTS}: run pytest tests/reliability first", file=sys.stderr)
        return 1
    text = table(rows)
    if args.write is None:
        sys.stdout.write(text)
        return 0
    doc = args.write.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"{args.write} has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    args.write.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")
    print(f"{len(rows)} rows written to {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
