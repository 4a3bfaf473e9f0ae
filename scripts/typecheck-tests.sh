#!/usr/bin/env bash
# mypy over tests/, run by `make typecheck` after the strict run over the product and bench/ (the local
# cluster checks its own tests with its own settings, localcluster/pyproject.toml)
# (pyproject's [tool.mypy]; its settings, strict, are the ones used here too, less the one relaxation below).
#
# Why one mypy run per test directory: tests/ has no __init__.py, and pytest (prepend import mode) puts the
# directory of each test file on sys.path, so every test directory is its own top-level namespace: several
# files are all called `conftest`, and helpers are imported by bare name (`from manager_support import ...`
# beside the tests that use it, `from podsecurity import ...` from tests/ itself). One mypy run can hold each
# module name once, so each directory gets its own run, with the search path pytest gives its tests: the
# directory, tests/ and the repository root (for `bench`). The directories are found, not listed: a new test
# directory is checked without anyone editing this file. Each run has its own cache, as the same name
# (`conftest`) is a different file in each.
#
# The one relaxation, for tests only: union-attr. The typed kubernetes client (37) declares every model field
# Optional, so `pod.status.phase` is an error each time a test reads what the API server answered. In a test a
# None there fails the test anyway (AttributeError, or the assert's comparison), so narrowing each read would
# add noise and catch nothing. Everything else is strict, as in the product.
#
# Usage: scripts/typecheck-tests.sh [MYPY]   (default .venv/bin/mypy); exit 0 when every directory is clean,
# 1 naming the directories that are not (re-run one with the command printed above its errors).
set -uo pipefail
cd "$(dirname "$0")/.."
MYPY=${1:-.venv/bin/mypy}
RELAXED=(--disable-error-code union-attr)

if [[ ! -x $MYPY ]]; then
    echo "typecheck-tests: $MYPY not found; run \`make venv\` first, or pass the mypy to use" >&2
    exit 2
fi

failed=()
while IFS= read -r dir; do
    files=("$dir"/*.py)
    cache=.mypy_cache/tests/${dir//\//-}
    if ! out=$(MYPYPATH="$dir:tests:." "$MYPY" --cache-dir "$cache" "${RELAXED[@]}" "${files[@]}" 2>&1); then
        echo "== MYPYPATH=$dir:tests:. $MYPY ${RELAXED[*]} $dir/*.py"
        echo "$out"
        failed+=("$dir")
    fi
done < <(find tests -name '*.py' -not -path '*/__pycache__/*' -printf '%h\n' | sort -u)

if ((${#failed[@]})); then
    echo "typecheck-tests: mypy found errors in ${failed[*]}" >&2
    exit 1
fi
echo "typecheck-tests: tests/ clean"
