# One command surface. `make demo` and `make test` work on a fresh machine with Python 3 and Java 17+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=
# Two workers, a test module (or a test class: the table machine's variants) per worker at a time; a
# Spark module keeps its session. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadscope

.DEFAULT_GOAL := help
.PHONY: help install install-spark install-test install-dev demo test test-long lint typecheck docs bench bench-quick clean

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python ## Create .venv and install metatxn's core (no Spark)
	$(BIN)/pip install -q -e .

install-spark: $(BIN)/python ## Create .venv and install metatxn with Spark and its SQL layer
	$(BIN)/pip install -q -e '.[spark]'

install-test: $(BIN)/python ## Create .venv and install metatxn with everything the tests use (Spark too)
	$(BIN)/pip install -q -e '.[test]'
	@# Azurite (the Azure tests' server) from the npm registry; without npm those tests skip.
	@if command -v npm >/dev/null 2>&1; then [ -x $(VENV)/node/node_modules/.bin/azurite-blob ] || npm install -q --no-audit --no-fund --prefix $(VENV)/node azurite@3; else echo 'npm not found: the Azure tests will be skipped'; fi

install-dev: $(BIN)/python ## Also install the linters and the type checker
	$(BIN)/pip install -q -e '.[dev]'

demo: install-spark ## Set up and run the main job (a Spark pipeline) on ./warehouse
	$(BIN)/metatxn demo --warehouse warehouse

test: install-test ## Set up and run the test suite (derandomized Hypothesis examples; `long` tests left out)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

HYPOTHESIS_PROFILE ?= dev
# -m "": no marker expression, so the `long` tests that pyproject's addopts leaves out run too.
test-long: install-test ## Every test, `long` ones too, with random Hypothesis examples (dev: about 35 min; or =long)
	HYPOTHESIS_PROFILE=$(HYPOTHESIS_PROFILE) $(BIN)/python -m pytest $(XDIST) -m "" $(PYTEST_ARGS)

lint: install-dev ## ruff over the code and tests
	$(BIN)/ruff check txn timeline indexes tests

# metatxn.timeline and metatxn.indexes as folders, for the tools that read source files by module
# name and do not follow setuptools' editable import hook (mypy, the guide's API reference).
NAMESPACE := build/namespace
$(NAMESPACE)/metatxn:
	mkdir -p $@
	ln -sfn ../../../timeline $@/timeline
	ln -sfn ../../../indexes $@/indexes

typecheck: install-dev $(NAMESPACE)/metatxn ## mypy --strict over the packages
	$(BIN)/mypy

docs: $(BIN)/python $(NAMESPACE)/metatxn ## Build the user guide (docs/) into site/; any warning fails the build
	$(BIN)/pip install -q -e '.[docs]'
	$(BIN)/mkdocs build --strict --quiet

bench: install-spark ## Benchmarks against deltalake and pyiceberg (long: builds 10,000-commit tables)
	$(BIN)/pip install -q -r bench/requirements.txt
	$(BIN)/python -m bench.bench_commits --build-budget 3600 --out bench/out/commits.json
	$(BIN)/python -m bench.bench_mutations --out bench/out/mutations.json
	$(BIN)/python -m bench.bench_spark
	$(BIN)/python -m bench.bench_compaction --out bench/out/compaction.json
	$(BIN)/python -m bench.bench_changes --out bench/out/changes.json

bench-quick: install-spark ## A smoke run of the benchmarks (about a minute)
	$(BIN)/pip install -q -r bench/requirements.txt
	$(BIN)/python -m bench.bench_commits --quick
	$(BIN)/python -m bench.bench_mutations --quick
	$(BIN)/python -m bench.bench_spark --quick
	$(BIN)/python -m bench.bench_compaction --quick
	$(BIN)/python -m bench.bench_open_reads --quick
	$(BIN)/python -m bench.bench_changes --quick

clean: ## Remove .venv, caches and the demo warehouse
	rm -rf $(VENV) warehouse site .pytest_cache .hypothesis .mypy_cache .ruff_cache *.egg-info
