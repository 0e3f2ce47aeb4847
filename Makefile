# One command per job. Every target sets up the virtual environment first (idempotent).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,profiling,zoo-ci

.PHONY: setup test pipeline ingest lint

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"

# The test command the README gives and CI runs.
test: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q

# The main job: the whole DVC pipeline on the default data (../shared/data/raw mirror), offline.
pipeline: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

# Only the ingest stage (raw mirror -> data/processed tables), about 10 s after setup.
ingest: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro ingest

lint: setup
	$(BIN)/ruff check src tests benchmarks
