# The two commands a new user needs: `make run` and `make test`.
# Each creates .venv with the Python it finds (3.11 or newer) and installs what it needs.

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/town.toml
CODE := src runtime actors benchmarks tests docs/examples
# The editable install is strict (a tree of links, which mypy reads like any installed
# package), so it is redone whenever a module is added, moved or removed.
PIP_INSTALL := $(BIN)/python -m pip install --config-settings editable_mode=strict

.PHONY: run test test-fast lint typecheck pytest docs docs-serve dist chart clean faults FORCE

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "actormem needs Python 3.11 or newer on PATH (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip > /dev/null 2>&1 || true

# The list of the package's modules; its time changes only when the list does.
$(VENV)/.modules: FORCE | $(BIN)/python
	@find src runtime actors benchmarks -name '*.py' -not -path '*/__pycache__/*' | sort > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

# pip's and setuptools' chatter goes to a log that is shown only when the install fails.
$(VENV)/.installed-run: pyproject.toml $(VENV)/.modules | $(BIN)/python
	@echo "installing actormem into $(VENV) (log: $(VENV)/install.log)"
	@$(PIP_INSTALL) -e . > $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; exit 1; }
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.modules | $(BIN)/python
	@echo "installing actormem with its test extras into $(VENV) (log: $(VENV)/install.log)"
	@$(PIP_INSTALL) -e '.[test]' > $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; exit 1; }
	@touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/actormem simulate $(CONFIG)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check $(CODE)

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

# The unit tests in four processes, then the tests marked slow in three: both mostly
# wait on Redis, timers and child processes, so this 2-core budget holds either way.
pytest: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m "not slow" -n 4
	$(BIN)/python -m pytest -m slow -n 3

test: lint typecheck docs pytest

# The docs site (mkdocs.yml): built strictly, so a broken link, a missing page or an
# API name that no longer resolves fails make test. The test extras hold the docs extra.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: $(VENV)/.installed-test
	$(MKDOCS) build --strict --quiet

docs-serve: $(VENV)/.installed-test
	$(MKDOCS) serve

# The wheel and the sdist, in dist/ (pip install 'dist/actormem-<version>-py3-none-any.whl[mcp]').
dist: $(VENV)/.installed-run
	@$(BIN)/python -m pip install --quiet build
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# The chart of docs/performance.md and the README, drawn by the benchmark's own --plot.
CHART_OUT := reports/chart
chart: $(VENV)/.installed-test
	rm -rf $(CHART_OUT)
	$(BIN)/actormem bench redis_throughput --agents 1 100 --messages 10000 --repeat 3 \
		--plot --quiet --out $(CHART_OUT)
	cp $(CHART_OUT)/redis_throughput-*.png docs/img/redis_throughput.png

# The quick loop while working (under a minute): the unit tests of every module, in
# four processes (they mostly wait on Redis and timers); the tests marked slow
# (end-to-end, subprocess, multi-process, benchmark, packaging and fault tests) run
# in make test too. The loop keeps its compiled and assertion-rewritten modules in
# __pycache__ even where PYTHONDONTWRITEBYTECODE is set: without them each of the
# four processes compiles the whole suite again, about 5 s of the minute.
test-fast: $(VENV)/.installed-test
	$(BIN)/ruff check $(CODE)
	PYTHONDONTWRITEBYTECODE= ACTORMEM_TESTS=fast $(BIN)/python -m pytest -q -m "not slow" -n 4

# The fault-injection and bad-input suite alone, at full size (make test runs the
# same tests smaller); prints the fault table and writes reports/faults.json.
faults: $(VENV)/.installed-test
	ACTORMEM_FAULTS=full $(BIN)/python -m pytest -m faults tests/faults

clean:
	rm -rf $(VENV) build dist site .pytest_cache .mypy_cache .ruff_cache
