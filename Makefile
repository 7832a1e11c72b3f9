# dlperf: two entry points (see README).
#   make run   - set everything up and run the main job on the embedded default
#   make test  - install everything (Python deps, Debian packages, servers) and run the suite
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: build-ext fuzz install install-smoke test-env test test-unit lint run serve shell bench clean

STEP := bash scripts/step.sh

$(BIN)/python:
	@$(STEP) "virtual environment $(VENV)" $(PY) -m venv $(VENV)
	@$(STEP) "pip upgrade" $(BIN)/pip install -q --upgrade pip

# stamps: a second `make run`/`make test` installs nothing unless the lock or pyproject changed
install: $(VENV)/.installed dlperf_tasks/catalog/builtin_suites.json
# the built-in suites validated once with every check, loaded from there while a file is unchanged
dlperf_tasks/catalog/builtin_suites.json: $(VENV)/.installed $(wildcard dlperf_tasks/catalog/suites/*.y*ml dlperf_tasks/catalog/*.py)
	@$(STEP) "built-in suites validated" $(BIN)/dlperf catalog build
$(VENV)/.installed: requirements.lock pyproject.toml setup.py $(wildcard dlperf_tasks/frameworks/_c*.c dlperf_tasks/frameworks/_c*.h) | $(BIN)/python
	@$(STEP) "Python packages (requirements.lock)" $(BIN)/pip install -q -r requirements.lock
	@$(STEP) "dlperf itself (editable, C scanners built)" $(BIN)/pip install -q --no-deps -e . --config-settings editable_mode=compat
	@# bytecode, as a wheel install has it (PYTHONDONTWRITEBYTECODE=1 shells never write it)
	@$(STEP) "bytecode" $(BIN)/python -m compileall -q dlperf_tasks
	@$(BIN)/dlperf --version | tail -n 1  # which compiled scanners are in use (a failed build says so here)
	@touch $@

# the C scanners (setup.py) after a change to a dlperf_tasks/frameworks/_c*.c file: built by pip in an
# isolated environment with pyproject's setuptools (the venv's own may be too old for its license field).
# DLPERF_PURE_PYTHON=1 runs the pure-Python parsers instead, without rebuilding anything.
build-ext: install
	$(BIN)/pip install -q --no-deps -e . --config-settings editable_mode=compat
	$(BIN)/python -m compileall -q dlperf_tasks
	$(BIN)/dlperf --version | tail -n 1

# the two C scanners built with AddressSanitizer/UndefinedBehaviorSanitizer, fed seeded random logs,
# each result compared with the pure-Python parsers' (FUZZ_CASES, FUZZ_SEED to change the run)
FUZZ_CASES ?= 3000
FUZZ_SEED ?= 1
fuzz: install
	bash scripts/fuzz-scanners.sh $(abspath $(BIN))/python $(FUZZ_CASES) $(FUZZ_SEED)

install-smoke: install $(VENV)/.installed-torch
$(VENV)/.installed-torch: | $(BIN)/python
	@$(STEP) "PyTorch for the smoke suite (CPU is enough)" $(BIN)/pip install -q torch==2.13.0
	@touch $@

test-env:
	bash scripts/setup-test-env.sh

lint: install
	$(BIN)/ruff check dlperf_tasks dags plugins tests bench docker scripts
	$(BIN)/mypy

test-unit: install
	$(BIN)/python -m pytest tests/unit -q -m "not slow" $(PYTEST_ARGS)

# the suite in TEST_WORKERS pytest-xdist workers, a whole file to one worker (its module fixtures
# run once); each worker that needs the simulated cluster has its own (tests/fixtures/cluster.py)
TEST_WORKERS ?= 3
test: install install-smoke test-env lint
	$(BIN)/python -m pytest tests -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

run: install install-smoke
	@bash scripts/run-embedded.sh

# a shell with the venv active: dlperf and airflow on the PATH (exit to leave)
shell: install
	@echo "a shell with $(VENV) active: dlperf, airflow on the PATH; 'exit' leaves it"
	@bash --rcfile <(echo '[ -f ~/.bashrc ] && . ~/.bashrc; . $(VENV)/bin/activate') -i

# the embedded default as a service: UI + scheduler + dag-processor + triggerer (Ctrl-C stops it);
# e.g. make serve SERVE_ARGS="--dags unpause --port 8081"
serve: install install-smoke
	$(BIN)/python -m dlperf_tasks serve $(SERVE_ARGS)

bench: install
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .airflow .run out
