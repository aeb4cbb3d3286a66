# The two commands a new user needs: `make run` and `make test`.
# Each creates .venv with the Python it finds (3.11 or newer) and installs what it needs.

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/town.toml

.PHONY: run test lint typecheck pytest clean faults

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "actormem needs Python 3.11 or newer on PATH (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/actormem simulate $(CONFIG)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check runtime actors tests benchmarks
	$(BIN)/ruff format --check runtime actors tests benchmarks

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

pytest: $(VENV)/.installed-test
	$(BIN)/python -m pytest

test: lint typecheck pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
