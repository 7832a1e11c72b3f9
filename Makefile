# dlperf: two entry points (see README).
#   make run   - set everything up and run the main job on the embedded default
#   make test  - install everything (Python deps, Debian packages, servers) and run the suite
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: build-ext install install-smoke test-env test test-unit lint run serve bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# stamps: a second `make run`/`make test` installs nothing unless the lock or pyproject changed
install: $(VENV)/.installed
$(VENV)/.installed: requirements.lock pyproject.toml setup.py $(wildcard dlperf_tasks/frameworks/_c*.c dlperf_tasks/frameworks/_c*.h) | $(BIN)/python
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e . --config-settings editable_mode=compat
	$(BIN)/python -m compileall -q dlperf_tasks  # bytecode, as a wheel install has it (PYTHONDONTWRITEBYTECODE=1 shells never write it)
	touch $@

# the C scanners (setup.py) after a change to a dlperf_tasks/frameworks/_c*.c file
build-ext: install
	$(BIN)/python setup.py -q build_ext --inplace
	$(BIN)/python -m compileall -q dlperf_tasks

install-smoke: install $(VENV)/.installed-torch
$(VENV)/.installed-torch: | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	touch $@

test-env:
	bash scripts/setup-test-env.sh

lint: install
	$(BIN)/ruff check dlperf_tasks dags plugins tests bench docker scripts

test-unit: install
	$(BIN)/python -m pytest tests/unit -q -m "not slow" $(PYTEST_ARGS)

# the suite in TEST_WORKERS pytest-xdist workers, a whole file to one worker (its module fixtures
# run once); each worker that needs the simulated cluster has its own (tests/fixtures/cluster.py)
TEST_WORKERS ?= 3
test: install install-smoke test-env lint
	$(BIN)/python -m pytest tests -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

run: install install-smoke
	bash scripts/run-embedded.sh

# the embedded default as a service: UI + scheduler + dag-processor + triggerer (Ctrl-C stops it);
# e.g. make serve SERVE_ARGS="--dags unpause --port 8081"
serve: install install-smoke
	$(BIN)/python -m dlperf_tasks serve $(SERVE_ARGS)

bench: install
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .airflow .run out
