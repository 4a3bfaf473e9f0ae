"""`make unit`, `make integration` and `make e2e` are the quick loop: together they must run exactly the tests
`make test` runs, each once, or a test silently drops out of every quick run (or runs twice)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pytest_args(target: str) -> list[str]:
    """The pytest arguments of `make TARGET`'s recipe, as make would run them (PY set to this interpreter)."""
    shown = subprocess.run(["make", "-n", "--no-print-directory", target, f"PY={sys.executable}"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    runs = [shlex.split(line) for line in shown.splitlines() if " -m pytest " in line]
    assert len(runs) == 1, f"make {target} should run pytest once:\n{shown}"
    return runs[0][runs[0].index("pytest") + 1:]


def _collected(args: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *args], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]  # 5: nothing collected
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def parts() -> dict[str, list[str]]:
    return {target: _collected(_pytest_args(target)) for target in ("test", "unit", "integration", "e2e")}


def test_unit_integration_and_e2e_split_the_whole_suite(parts: dict[str, list[str]]) -> None:
    whole, parts = parts["test"], {k: v for k, v in parts.items() if k != "test"}
    assert len(whole) > 500, len(whole)
    for target, tests in parts.items():
        assert tests, f"make {target} collects no test"
    seen = [test for tests in parts.values() for test in tests]
    twice = sorted({test for test in seen if seen.count(test) > 1})
    assert not twice, f"run by more than one of make unit/integration/e2e: {twice[:10]}"
    missing = sorted(set(whole) - set(seen))
    assert not missing, f"run by make test but by none of make unit/integration/e2e: {missing[:10]}"
    assert set(seen) == set(whole)


def test_unit_runs_no_cluster_test(parts: dict[str, list[str]]) -> None:
    elsewhere = ("/integration/", "/e2e/", "/reliability/")
    assert not [test for test in parts["unit"] if any(part in test for part in elsewhere)]
    e2e_marked = _collected([*_pytest_args("unit"), "-m", "e2e"])
    assert e2e_marked == [], e2e_marked
