# One-command entry points. `make setup` once, then `make test` (what CI runs) or `make conformance`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup test lint typecheck pytest conformance conformance-pg

setup:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"

lint:
	$(BIN)/ruff check guard proxy benchmark tests policies
	$(BIN)/ruff format --check guard proxy benchmark tests policies

typecheck:
	$(BIN)/mypy

pytest:
	$(BIN)/pytest -q

test: lint typecheck pytest

conformance:
	$(BIN)/shadowguard bench conformance

conformance-pg:
	$(BIN)/shadowguard bench conformance --db postgresql://postgres@127.0.0.1:5432/test
