# DistributeTrain — the two commands a person needs: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help test lint typecheck unit integration e2e bench bench-quick demo system-deps venv clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

system-deps:  ## Debian packages the local cluster and the e2e tests need (openssh-server, iproute2, nftables, cmake)
	@bash scripts/install-system-deps.sh

# The product (src/) and the local cluster it is tested on (localcluster/), both editable; only the product
# goes into the images.
$(STAMP): requirements.txt requirements-dev.txt requirements-train.txt constraints.txt pyproject.toml \
          localcluster/requirements.txt localcluster/pyproject.toml scripts/install-horovod.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -c constraints.txt -r requirements.txt -r localcluster/requirements.txt \
	  -r requirements-dev.txt -r requirements-train.txt
	bash scripts/install-horovod.sh $(VENV)
	$(VENV)/bin/pip install -q --no-deps -e . -e ./localcluster
	@touch $@

venv: system-deps $(STAMP)  ## create or reuse the virtual environment with every pinned dependency

# The local cluster (localcluster/) is a distribution of its own with its own ruff, mypy and import-linter
# settings (localcluster/pyproject.toml): ruff finds them by itself, mypy and lint-imports run from there.
LC_TOOL = cd localcluster && $(abspath $(VENV))/bin

lint: venv  ## ruff, the import layering contracts (the product's, bench's, the local cluster's), hadolint
	$(VENV)/bin/ruff check src localcluster tests bench base-image manager-image scripts
	$(VENV)/bin/lint-imports
	$(VENV)/bin/lint-imports --config bench/importlinter.toml
	$(LC_TOOL)/lint-imports
	$(VENV)/bin/hadolint base-image/Dockerfile manager-image/Dockerfile

typecheck: venv  ## mypy --strict over the product, bench/, tests/ (one run per directory), the local cluster and its tests
	$(VENV)/bin/mypy
	bash scripts/typecheck-tests.sh $(VENV)/bin/mypy
	$(LC_TOOL)/mypy
	$(LC_TOOL)/mypy --disable-error-code union-attr tests

test: lint typecheck  ## lint, type checks and the whole test suite (unit, integration, e2e), the local cluster's too
	$(PY) -m pytest tests localcluster/tests

# Three parts of that suite, for a quicker loop; together they are exactly `make test`'s tests
# (tests/repo/test_make_targets.py checks it). ARGS passes pytest options: make unit ARGS='-k planner -x'.
# tests/ by what the tests prove: unit (the product's pure cores, named after the module tested),
# benchmarks (bench/'s simulation, measurement parsing, report), repo (the repository's own files:
# Dockerfiles, kustomization, these targets, no machine paths), integration and reliability (against a local
# cluster), e2e (real processes, Horovod and TensorFlow; marked e2e wherever they live). The local cluster's
# own tests are in localcluster/tests, in the same three parts.
UNIT_TESTS := tests/unit tests/benchmarks tests/repo localcluster/tests/unit
INTEGRATION_TESTS := tests/integration localcluster/tests/integration tests/reliability

unit: venv  ## the pure cores, bench/ and the repository's files: no root, no job on a cluster (a few minutes)
	$(PY) -m pytest $(UNIT_TESTS) $(ARGS)

integration: venv  ## the manager and the API server against a local cluster of simulated kubelets (a few minutes)
	$(PY) -m pytest $(INTEGRATION_TESTS) -m "not e2e" $(ARGS)

e2e: venv  ## real sshd, Horovod and TensorFlow in pods run as processes (root; the slow part)
	$(PY) -m pytest tests localcluster/tests -m e2e $(ARGS)

bench: venv  ## every benchmark; results in bench/results/, report in docs/benchmarks.md
	$(PY) -m bench.run

bench-quick: venv  ## a smoke run of the benchmarks
	$(PY) -m bench.run --quick

demo: venv  ## the main job on a local cluster with nodes of 5, 3 and 2 GPUs
	bash scripts/demo.sh

clean:  ## remove the virtual environment and caches
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
