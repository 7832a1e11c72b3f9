# dlperf: two entry points (see README).
#   make run   - set everything up and run the main job on the embedded default
#   make test  - install everything (Python deps, Debian packages, servers) and run the suite
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-smoke test-env test run bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .

install-smoke: install
	$(BIN)/pip install -q torch==2.13.0

test-env:
	bash scripts/setup-test-env.sh

test: install install-smoke test-env
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

run: install install-smoke
	bash scripts/run-embedded.sh

bench: install
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .airflow .run out
