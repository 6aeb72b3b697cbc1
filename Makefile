# One command surface. `make demo` and `make test` work on a fresh machine with Python 3 and Java 17+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install install-test install-dev demo test lint typecheck clean

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python ## Create .venv and install metatxn
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python ## Create .venv and install metatxn with its test dependencies
	$(BIN)/pip install -q -e '.[test]'

install-dev: $(BIN)/python ## Also install the linters and the type checker
	$(BIN)/pip install -q -e '.[dev]'

demo: install ## Set up and run the main job on ./warehouse
	$(BIN)/metatxn demo --warehouse warehouse

test: install-test ## Set up and run the whole test suite
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install-dev ## ruff over the code and tests
	$(BIN)/ruff check txn timeline indexes tests

typecheck: install-dev ## mypy --strict over the packages
	$(BIN)/mypy

clean: ## Remove .venv, caches and the demo warehouse
	rm -rf $(VENV) warehouse .pytest_cache .hypothesis .mypy_cache .ruff_cache *.egg-info
