# Everything runs from .venv; `make setup` creates it. Targets that need a tool install it themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck check bench-proxy bench-sim bench-scenarios

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: setup
	$(BIN)/llm-gateway demo

test: setup promtool
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff check gateway tests loadtests
	$(BIN)/ruff format --check gateway tests loadtests

typecheck: setup
	$(BIN)/mypy

check: lint typecheck test

# --- alerts (promtool, Prometheus) ---

# --- load tests (Locust) ---

# --- real vLLM engine on the CPU ---

# --- benchmarks ---
