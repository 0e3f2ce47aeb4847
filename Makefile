# One command per job. Every target sets up the virtual environment first (idempotent).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,profiling,zoo-ci

.PHONY: setup test pipeline ingest lint

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# --no-compile: pip byte-compiles every installed module (about 45 s of a fresh set-up on 2 cores); Python compiles
# the modules a job imports when it first imports them, and keeps them in __pycache__.
setup: $(BIN)/python
	$(BIN)/pip install -q --no-compile -e ".[$(EXTRAS)]"

# The test command the README gives and CI runs: two pytest-xdist workers (CI has 2 cores; tests/conftest.py keeps a
# folder's shared fixtures on one worker). TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
test: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=25

# The main job: the whole DVC pipeline on the default data (../shared/data/raw mirror), offline. It installs what
# the pipeline runs (PIPELINE_EXTRAS: none by default), not the test tools and the model zoo (torch, TVM, JAX, Keras:
# about 10 s of a fresh set-up): the zoo's stages (ptx, layers) reuse their committed tables and skip on a clone.
# A change under src/zoo reruns them: `make setup` (or PIPELINE_EXTRAS=zoo-ci) first.
PIPELINE_EXTRAS ?=
pipeline: $(BIN)/python
	$(BIN)/pip install -q --no-compile -e ".$(if $(strip $(PIPELINE_EXTRAS)),[$(PIPELINE_EXTRAS)])"
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

# Only the ingest stage (raw mirror -> data/processed tables), about 10 s after setup.
ingest: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro ingest

lint: setup
	$(BIN)/ruff check src tests benchmarks
