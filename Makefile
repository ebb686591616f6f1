# One-command entry points. `make setup` once, then `make demo` (the quickstart), `make test` (what CI
# runs) or `make conformance`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint typecheck pytest conformance conformance-pg

setup:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"

# The quickstart: the proxy with proxy/demo/shadowguard.yaml in the background, the scripted agent
# against it once /readyz answers, then the proxy stopped (proxy/demo/__main__.py). DEMO_ARGS=--port 0
# picks a free port; --mode legacy uses the handshake protocol era.
demo:
	$(BIN)/python -m proxy.demo $(DEMO_ARGS)

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
